"""The UI's run page shows everything ``pgsched describe`` shows, line by line (issue 26
#3, I13): both render ``engine.run_facts``. Before, the run page lacked the reason line,
"by Replace", the retry decision and the wait; a fan-in run named one upstream run of two;
and the "why" page said "Never scheduled" for an EXDATE minute without naming it."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from cli_runner import pgsched
from conftest import History, Served, insert_run
from factories import RecordingLauncher, define
from pgsched.db import connection
from pgsched.engine import dispatch, pools, runs

_NOTHING = {"-", "—"}


def describe_lines(dsn: str, run_id: int) -> dict[str, str]:
    """describe's ``Label:  value`` lines, up to the retry chain."""
    out = pgsched("describe", str(run_id), dsn=dsn).out.split("\n\n")[0]
    pairs = (re.match(r"^([A-Za-z ]+):\s+(.*)$", line) for line in out.splitlines())
    return {found.group(1): found.group(2).strip() for found in pairs if found}


def page_lines(ui: Served, run_id: int) -> dict[str, str]:
    """The run page's field table, as text."""
    status, page = ui.get(f"/runs/{run_id}")
    assert status == 200
    table = page.split("<table class='fields'>")[1].split("</table>")[0]
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table, flags=re.S)
    return {
        html.unescape(label): re.sub(
            r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", value))
        ).strip()
        for label, value in rows
    }


def assert_same_lines(ui: Served, dsn: str, run_id: int) -> dict[str, str]:
    described, shown = describe_lines(dsn, run_id), page_lines(ui, run_id)
    assert list(shown) == list(described)
    for label, said in described.items():
        on_page = shown[label]
        if said in _NOTHING:
            assert on_page in _NOTHING, (label, on_page)
        else:  # describe adds the UTC time to a local one
            assert said == on_page or said.startswith(on_page + "  ("), (label, said, on_page)
    return described


def test_the_run_page_shows_every_line_of_describe_for_retried_replaced_and_requested_runs(
    ui: Served, dsn: str, history: History, conn: connection.Connection
) -> None:
    conn.execute(
        "UPDATE pgsched.job_runs SET retry_decision = 'retried: attempt 2 of 3 after 60 s'"
        " WHERE id = %s",
        [history.ids["failed"]],
    )
    replaced = insert_run(
        conn,
        history.definition,
        status="CANCELLED",
        trigger="manual",
        request_token="replaced",
        scheduled_for=history.completed,
        started_at=history.completed,
        finished_at=history.completed + timedelta(minutes=1),
        reason="Cancelled",
        error="replaced by a newer run (concurrencyPolicy Replace)",
        cancel_requested=True,
        cancel_requested_at=history.completed + timedelta(seconds=30),
        cancelled_by="Replace",
    )
    said = {
        run_id: assert_same_lines(ui, dsn, run_id) for run_id in (*history.ids.values(), replaced)
    }
    assert said[history.ids["failed"]]["Retry"] == "retried: attempt 2 of 3 after 60 s"
    assert said[history.ids["failed"]]["Reason"] == "BackoffLimitExceeded"
    assert said[history.ids["retry"]]["Retry of"] == (
        f"run {history.ids['failed']} (FAILED/BackoffLimitExceeded)"
    )
    assert said[replaced]["Cancellation"].endswith(" by Replace")


def test_the_run_page_says_what_a_queued_run_waits_for_as_describe_does(
    ui: Served, dsn: str, conn: connection.Connection
) -> None:
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    pools.upsert(conn, "team-a", "etl", 1)
    busy = define(conn, "busy", namespace="team-a", pool="etl", schedule="0 0 1 1 *", now=t0)
    held = define(conn, "held", namespace="team-a", pool="etl", schedule="0 0 1 1 *", now=t0)
    running = runs.run_now(conn, busy.id, token="a", scheduled_for=t0).run
    dispatch.run_once(conn, RecordingLauncher(), definition_ids=[busy.id], now=t0)
    waiting = runs.run_now(conn, held.id, token="b", scheduled_for=t0).run

    said = assert_same_lines(ui, dsn, waiting.id)
    assert said["Waiting for"] == f"pool etl (1 of 1 running: run {running.id})"


def test_a_fan_in_run_names_every_upstream_run_on_both_screens(
    ui: Served, dsn: str, conn: connection.Connection
) -> None:
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    extract = define(conn, "extract", namespace="team-a", schedule="0 1 * * *", now=t0)
    clean = define(conn, "clean", namespace="team-a", schedule="0 1 * * *", now=t0)
    load = define(
        conn,
        "load",
        namespace="team-a",
        after=[{"scheduledJob": "extract"}, {"scheduledJob": "clean"}],
        afterMode="All",
        now=t0,
    )
    ups = [
        insert_run(
            conn,
            job,
            status="COMPLETED",
            scheduled_for=t0,
            started_at=t0,
            finished_at=t0 + timedelta(minutes=1),
            reason="Succeeded",
        )
        for job in (extract, clean)
    ]
    down = insert_run(
        conn, load, status="QUEUED", trigger="upstream", scheduled_for=t0, upstream_run_id=ups[1]
    )
    for job, up in zip(("extract", "clean"), ups, strict=True):
        conn.execute(
            "INSERT INTO pgsched.chain_arrivals"
            " (downstream_id, upstream_name, upstream_run_id, consumed_by)"
            " VALUES (%s, %s, %s, %s)",
            [load.id, job, up, down],
        )
    said = assert_same_lines(ui, dsn, down)
    assert said["Upstream runs"] == (
        f"{ups[0]} of team-a/extract (COMPLETED), {ups[1]} of team-a/clean (COMPLETED)"
    )
    # pgsched runs names both too, in its chain column and its JSON.
    listed = pgsched("runs", "load", "--namespace", "team-a", dsn=dsn).out
    assert f"← {ups[0]}, {ups[1]}" in listed, listed
    [shown] = pgsched("runs", "load", "--namespace", "team-a", "-o", "json", dsn=dsn).json()["runs"]
    assert shown["upstreamRunIds"] == ups


def test_why_names_the_exdate_that_removes_an_occurrence(
    ui: Served, conn: connection.Connection
) -> None:
    define(
        conn,
        "holidays",
        namespace="team-a",
        rrule="DTSTART:20260101T090000\nRRULE:FREQ=DAILY\nEXDATE:20260601T090000",
        timeZone="Europe/Sofia",
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    status, page = ui.get("/ns/team-a/holidays/why?at=2026-06-01T09:00")
    assert status == 200
    answer = re.sub(r"<[^>]+>", " ", page.split("id='answer'")[1])
    assert "data-verdict='excluded'" in page
    assert "the rule's EXDATE 2026-06-01T09:00:00 (Europe/Sofia) removes the occurrence" in (
        html.unescape(answer)
    )


def test_why_says_a_coming_occurrence_of_a_suspended_job_will_be_skipped(
    ui: Served, conn: connection.Connection
) -> None:
    define(conn, "paused", namespace="team-a", schedule="0 9 * * *", suspend=True)
    status, page = ui.get("/ns/team-a/paused/why?at=2099-06-01T09:00")
    assert status == 200
    answer = html.unescape(re.sub(r"<[^>]+>", " ", page.split("id='answer'")[1]))
    assert "has not come yet" in answer
    assert "the ScheduledJob is suspended (spec.suspend is true): it will be SKIPPED/Suspended" in (
        answer
    )


def test_why_says_what_holds_a_queued_occurrence(ui: Served, conn: connection.Connection) -> None:
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    job = define(
        conn, "capped", namespace="team-a", schedule="0 * * * *", maxConcurrentRuns=1, now=t0
    )
    running = runs.run_now(conn, job.id, token="a", scheduled_for=t0 - timedelta(minutes=5)).run
    dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=t0)
    insert_run(conn, job, status="QUEUED", scheduled_for=t0)
    status, page = ui.get("/ns/team-a/capped/why?at=2026-06-01T12:00%2B00:00")
    assert status == 200
    answer = html.unescape(re.sub(r"<[^>]+>", " ", page.split("id='answer'")[1]))
    assert f"QUEUED, waiting for maxConcurrentRuns 1 (run {running.id} running)" in answer
