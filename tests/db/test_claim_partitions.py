"""The claim writes only the months that hold its candidates (migration 0015), however many
months of history job_runs keeps, and claims the same runs as before across months.

A function's inner plans are not EXPLAINable from outside; ``auto_explain`` (contrib,
loaded into the test's session only) logs the plan of each statement the claim runs, with
what it actually scanned. The claim runs its statements' generic plans (its
``plan_cache_mode``, whatever the session's), pruned at executor start: "Subplans Removed".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define
from pgsched.engine import dispatch, history

NOW = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
OLD_MONTHS = 12  # of history before this one: 12 + this month + 2 ahead + default


def _months_back(count: int) -> list[datetime]:
    month = datetime(NOW.year, NOW.month, 1, tzinfo=UTC)
    months = []
    for _ in range(count):
        month = history.add_months(month, -1)
        months.append(month)
    return months


def _queue(conn, definition_id, *scheduled: datetime) -> None:
    for at in scheduled:
        conn.execute(
            "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for)"
            " VALUES (%s, 'QUEUED', 'schedule', %s)",
            [definition_id, at],
        )


def _plans_of_claim(conn, **claim) -> dict[str, str]:
    """Claim once with auto_explain on; returns each statement's plan keyed by its text."""
    logged: list[str] = []
    conn.add_notice_handler(lambda notice: logged.append(notice.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_analyze = on")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET plan_cache_mode = force_custom_plan")  # the function's own wins
    conn.execute("SET client_min_messages = log")
    try:
        result = dispatch.run_once(conn, RecordingLauncher(), now=NOW, **claim)
    finally:
        conn.execute("RESET client_min_messages")
    plans = {}
    for message in logged:
        text = re.search(r"Query Text: (.*?)\n(?=\S)", message, re.DOTALL)
        if text:
            first = " ".join(text.group(1).split())
            plans[first] = message[text.end() :]
    plans["claimed"] = str(len(result.claimed))
    return plans


def _scanned(plan: str) -> set[str]:
    """The job_runs partitions a plan read rows from."""
    return set(re.findall(r"Scan(?: Backward)?(?: using \S+)? on (job_runs_\w+)", plan))


def _plan_starting(plans: dict[str, str], prefix: str) -> str:
    found = [plan for text, plan in plans.items() if text.startswith(prefix)]
    assert len(found) == 1, (prefix, list(plans))
    return found[0]


def test_the_claim_updates_only_the_months_of_its_candidates(conn):
    history.run_once(conn, retention=None, now=NOW)
    for month in _months_back(OLD_MONTHS):
        conn.execute("SELECT pgsched.create_run_partition(%s)", [month])
    queue = define(conn, "queue", now=NOW, maxConcurrentRuns=10)
    backfill = define(conn, "backfill", now=NOW, maxConcurrentRuns=10)
    skip = define(conn, "skip", now=NOW, maxConcurrentRuns=1, concurrencyPolicy="Skip")

    # This month only: every write of the claim reads this month's partition, no other.
    _queue(conn, queue.id, *(NOW - timedelta(minutes=m) for m in range(1, 4)))
    _queue(conn, skip.id, NOW - timedelta(minutes=2), NOW - timedelta(minutes=1))
    plans = _plans_of_claim(conn, batch_size=10)
    this_month = f"job_runs_y{NOW:%Y}m{NOW:%m}"
    claim_update = _plan_starting(plans, "UPDATE pgsched.job_runs AS r SET status = 'RUNNING'")
    skip_update = _plan_starting(plans, "UPDATE pgsched.job_runs AS r SET status = 'SKIPPED'")
    assert plans["claimed"] == "4"  # the queue's 3 and skip's first; its second is SKIPPED
    assert _scanned(claim_update) == {this_month}, claim_update
    assert _scanned(skip_update) == {this_month}, skip_update
    assert "Subplans Removed" in claim_update, claim_update  # the generic plan, pruned
    candidates = _plan_starting(plans, "SELECT coalesce(array_agg(c.id ORDER BY")
    assert "Subplans Removed: 2" in candidates, candidates  # the months ahead, after now

    # A backfill of months ago and this month's queue: the months between them, no others.
    _queue(conn, backfill.id, datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 5, 10, tzinfo=UTC))
    _queue(conn, queue.id, NOW - timedelta(seconds=30))
    plans = _plans_of_claim(conn, batch_size=10)
    claim_update = _plan_starting(plans, "UPDATE pgsched.job_runs AS r SET status = 'RUNNING'")
    assert plans["claimed"] == "3"
    scanned = _scanned(claim_update)
    # (April, between the two, holds nothing: it may be read or pruned.)
    assert {"job_runs_y2026m03", "job_runs_y2026m05", this_month} <= scanned, claim_update
    assert scanned <= {f"job_runs_y2026m{m:02}" for m in range(3, 13)}, claim_update
    assert not conn.execute("SELECT id FROM pgsched.job_runs WHERE status = 'QUEUED'").fetchall()
