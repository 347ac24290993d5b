"""Invariant checks over the database, shared by race, fault and chaos tests.

Each function returns a list of human-readable violations (empty means the invariant
holds), so a failing test prints exactly what went wrong. Most read only ``job_runs`` and
``job_definitions``; the I4/I5 checks over *changes* read a test-only audit table that
:func:`install_run_audit` adds to a test database (never to the product's schema).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from pgsched.db.connection import Connection
from pgsched.engine.retry import RetryPolicy
from pgsched.k8s import names

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "SKIPPED")
# Every status change the engine may make; anything else rewrites history (I4).
LEGAL_TRANSITIONS = {
    ("QUEUED", "RUNNING"),
    ("QUEUED", "CANCELLED"),
    ("QUEUED", "SKIPPED"),
    ("RUNNING", "COMPLETED"),
    ("RUNNING", "FAILED"),
    ("RUNNING", "CANCELLED"),
}


def no_double_launch(launched: Iterable[int]) -> list[str]:
    """I1: every claimed run was launched by exactly one claimer."""
    counts = Counter(launched)
    return [f"run {run_id} launched {count} times" for run_id, count in counts.items() if count > 1]


# A run the new primary queued again for a run a failover lost, skipped when that run was
# restored from its Job (migration 0034) before it was ever claimed: not a second run.
_NOT_A_SKIPPED_DUPLICATE = (
    "NOT (reason IS NOT DISTINCT FROM 'DuplicateOfRestoredRun' AND started_at IS NULL)"
)


def no_duplicate_occurrence(conn: Connection) -> list[str]:
    """I1: no (definition, scheduled_for) occurrence materialized twice."""
    rows = conn.execute(
        "SELECT definition_id, scheduled_for, count(*) AS n FROM pgsched.job_runs"
        f" WHERE trigger = 'schedule' AND {_NOT_A_SKIPPED_DUPLICATE}"
        " GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()
    return [
        f"occurrence {row['scheduled_for']} of {row['definition_id']} materialized {row['n']} times"
        for row in rows
    ]


def one_run_per_request(conn: Connection) -> list[str]:
    """I1 for run-now: no (definition, request token) queued more than one run."""
    rows = conn.execute(
        "SELECT definition_id, request_token, count(*) AS n, array_agg(id ORDER BY id) AS ids"
        f" FROM pgsched.job_runs WHERE request_token IS NOT NULL AND {_NOT_A_SKIPPED_DUPLICATE}"
        " GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()
    return [
        f"request {row['request_token']!r} of {row['definition_id']} queued {row['n']} runs"
        f" ({row['ids']})"
        for row in rows
    ]


def never_over_cap(conn: Connection) -> list[str]:
    """I2 from the recorded intervals: sweep every definition's [started_at, finished_at).

    started_at and finished_at come from clock_timestamp() taken after the claim's locks and
    before the finish's commit, so a run that made room always ended before its successor
    started; at equal timestamps the start is counted first (the strict reading).
    """
    rows = conn.execute(
        "SELECT r.definition_id, r.started_at, coalesce(r.finished_at, 'infinity') AS finished_at,"
        " d.max_concurrent_runs AS cap"
        " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
        " WHERE r.started_at IS NOT NULL"
    ).fetchall()
    events: dict[object, list[tuple[object, int]]] = defaultdict(list)
    caps = {}
    for row in rows:
        events[row["definition_id"]].append((row["started_at"], 1))
        events[row["definition_id"]].append((row["finished_at"], -1))
        caps[row["definition_id"]] = row["cap"]
    problems = []
    for definition_id, items in events.items():
        running = peak = 0
        for _, delta in sorted(items, key=lambda item: (item[0], -item[1])):
            running += delta
            peak = max(peak, running)
        if peak > caps[definition_id]:
            problems.append(
                f"definition {definition_id} reached {peak} running, cap {caps[definition_id]}"
            )
    return problems


def never_over_pool_limit(conn: Connection) -> list[str]:
    """I9 from the recorded intervals: sweep every concurrency pool's [started_at,
    finished_at) over all the jobs that name it, against the pool's limit (the limit at
    the end: the race tests do not change it)."""
    rows = conn.execute(
        "SELECT d.pool, r.started_at, coalesce(r.finished_at, 'infinity') AS finished_at,"
        " p.concurrency_limit AS pool_limit"
        " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
        " JOIN pgsched.job_pools p ON p.namespace || '/' || p.name = d.pool"
        " WHERE r.started_at IS NOT NULL"
    ).fetchall()
    events: dict[str, list[tuple[object, int]]] = defaultdict(list)
    limits = {}
    for row in rows:
        events[row["pool"]].append((row["started_at"], 1))
        events[row["pool"]].append((row["finished_at"], -1))
        limits[row["pool"]] = row["pool_limit"]
    problems = []
    for pool, items in events.items():
        running = peak = 0
        for _, delta in sorted(items, key=lambda item: (item[0], -item[1])):
            running += delta
            peak = max(peak, running)
        if peak > limits[pool]:
            problems.append(f"pool {pool} reached {peak} running, limit {limits[pool]}")
    return problems


def every_attempt_terminal(conn: Connection) -> list[str]:
    """I3: nothing left behind."""
    rows = conn.execute(
        "SELECT status, count(*) AS n FROM pgsched.job_runs"
        " WHERE status IN ('QUEUED', 'RUNNING') GROUP BY status"
    ).fetchall()
    return [f"{row['n']} runs still {row['status']}" for row in rows]


def launches_hold_their_claim(conn: Connection, launches: Iterable[tuple[int, str]]) -> list[str]:
    """I1: every launch carried the lease of its run's one and only claim.

    A claim mints a fresh lease token, so a run claimed twice is launched with two tokens
    and at most one of them can still be on the row. ``launches`` are (run id, lease
    fingerprint) pairs: what a Job carries (``names.lease_fingerprint`` of the token)."""
    launched = list(launches)
    rows = conn.execute(
        "SELECT id, lease_token::text AS lease FROM pgsched.job_runs WHERE id = ANY(%s)",
        [sorted({run_id for run_id, _ in launched})],
    ).fetchall()
    leases = {row["id"]: names.lease_fingerprint(row["lease"]) for row in rows}
    problems = []
    for run_id, token in launched:
        if run_id not in leases:
            problems.append(f"run {run_id} was launched but has no row")
        elif leases[run_id] != token:
            problems.append(
                f"run {run_id} was launched with lease {token} but its row holds"
                f" {leases[run_id]}: claimed more than once"
            )
    return problems


def deadlines_kept(
    conn: Connection,
    *,
    slack_seconds: float,
    verdict_allowance: Callable[[datetime, datetime], float] | None = None,
    silence_allowance: Callable[[datetime, datetime], float] | None = None,
) -> list[str]:
    """I3: runs ended within their deadlines, and not before them.

    - a HeartbeatLost run was reaped after ``heartbeat.timeoutSeconds`` of silence (never
      earlier: that would kill live work) and at most ``slack_seconds`` later;
    - an Orphaned run never heartbeated and was reaped between ``orphanTimeoutSeconds``
      and that plus the slack;
    - a run with a starting deadline started before it, or was skipped at or after it.

    A container run's silence only asks the API for a verdict (``outcome_pending_at``,
    I8): then the timeout and slack bound the moment it was asked, and the verdict itself
    may take ``verdict_allowance(asked, ended)`` seconds (the verdict interval plus the
    API server's downtime in between) plus the slack.

    The slack covers the tick interval and every stall the test injected (a paused
    leader, a database restart): the reaper cannot run while nobody can lead. A run's
    reaping may also be later by ``silence_allowance(silent since, reaped)`` seconds: the
    time no operator replica was there meanwhile (the reaper counts no silence across it,
    ``pgsched.silent_since``); never earlier than its timeout after its last sign of life.
    """
    rows = conn.execute(
        "SELECT r.id, r.status, r.reason, r.started_at, r.heartbeat_at, r.finished_at,"
        " r.outcome_pending_at, r.deadline_at, d.heartbeat_timeout_seconds AS timeout,"
        " d.orphan_timeout_seconds AS orphan_timeout"
        " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
        " WHERE r.reason IN ('HeartbeatLost', 'Orphaned', 'DeadlineMissed')"
        " OR (r.deadline_at IS NOT NULL AND r.started_at IS NOT NULL)"
    ).fetchall()
    slack = timedelta(seconds=slack_seconds)

    def away_between(since: datetime, until: datetime) -> timedelta:
        return timedelta(seconds=silence_allowance(since, until) if silence_allowance else 0.0)

    problems = []
    for row in rows:
        run = f"run {row['id']}"
        asked = row["outcome_pending_at"]
        reaped = asked or row["finished_at"]
        if row["reason"] in ("HeartbeatLost", "Orphaned") and asked is not None:
            allowance = verdict_allowance(asked, row["finished_at"]) if verdict_allowance else 0
            took = (row["finished_at"] - asked).total_seconds()
            if took > allowance + slack_seconds:
                problems.append(
                    f"{run}: its verdict ({row['reason']}) took {took:.1f}s after it was asked"
                    f" (allowed {allowance:.1f}s for the verdict interval and the API server's"
                    f" downtime, slack {slack_seconds:g}s)"
                )
        if row["reason"] == "HeartbeatLost":
            silent = reaped - row["heartbeat_at"]
            limit = timedelta(seconds=row["timeout"])
            away = away_between(row["heartbeat_at"], reaped)
            if not limit <= silent <= limit + slack + away:
                problems.append(
                    f"{run} reaped HeartbeatLost {silent.total_seconds():.1f}s after its last"
                    f" heartbeat (timeout {row['timeout']}s, slack {slack_seconds:g}s"
                    + (f", no replica there {away.total_seconds():.1f}s meanwhile" if away else "")
                    + ")"
                    + (" (when its verdict was asked)" if asked else "")
                )
        elif row["reason"] == "Orphaned":
            silent = reaped - row["started_at"]
            limit = timedelta(seconds=row["orphan_timeout"])
            away = away_between(row["started_at"], reaped)
            if row["heartbeat_at"] is not None or not limit <= silent <= limit + slack + away:
                problems.append(
                    f"{run} reaped Orphaned {silent.total_seconds():.1f}s after its claim"
                    f" (heartbeat {row['heartbeat_at']}, orphan timeout"
                    f" {row['orphan_timeout']}s, slack {slack_seconds:g}s"
                    + (f", no replica there {away.total_seconds():.1f}s meanwhile" if away else "")
                    + ")"
                    + (" (when its verdict was asked)" if asked else "")
                )
        elif (
            # (a run skipped when materialized already late carries no deadline_at)
            row["reason"] == "DeadlineMissed"
            and row["deadline_at"] is not None
            and (row["started_at"] is not None or row["finished_at"] < row["deadline_at"])
        ):
            problems.append(
                f"{run} skipped DeadlineMissed at {row['finished_at']}, before its"
                f" deadline {row['deadline_at']} or after starting"
            )
        started, deadline = row["started_at"], row["deadline_at"]
        if started is not None and deadline is not None and started > deadline:
            problems.append(f"{run} started at {started}, after its starting deadline {deadline}")
    return problems


# -- the audit trail of changes (test databases only) -------------------------------------

_AUDIT_DDL = """
CREATE SCHEMA IF NOT EXISTS test_audit;
CREATE TABLE IF NOT EXISTS test_audit.run_changes (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  bigint NOT NULL,
    op      text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    old_row jsonb,
    new_row jsonb
);
CREATE OR REPLACE FUNCTION test_audit.record_run_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO test_audit.run_changes (run_id, op, old_row) VALUES (OLD.id, 'DELETE', to_jsonb(OLD));
    ELSIF OLD.status IS DISTINCT FROM NEW.status
       OR (OLD.definition_id, OLD.trigger, OLD.scheduled_for, OLD.attempt, OLD.retry_of)
          IS DISTINCT FROM (NEW.definition_id, NEW.trigger, NEW.scheduled_for, NEW.attempt, NEW.retry_of)
       OR (OLD.status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'SKIPPED')
           AND (OLD.reason, OLD.error, OLD.exit_code, OLD.started_at, OLD.finished_at, OLD.lease_token)
               IS DISTINCT FROM
               (NEW.reason, NEW.error, NEW.exit_code, NEW.started_at, NEW.finished_at, NEW.lease_token))
    THEN
        INSERT INTO test_audit.run_changes (run_id, op, old_row, new_row)
        VALUES (NEW.id, 'UPDATE', to_jsonb(OLD), to_jsonb(NEW));
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS job_runs_test_audit ON pgsched.job_runs;
CREATE TRIGGER job_runs_test_audit
    AFTER UPDATE OR DELETE ON pgsched.job_runs
    FOR EACH ROW EXECUTE FUNCTION test_audit.record_run_change();
"""

_FINAL_FIELDS = ("reason", "error", "exit_code", "started_at", "finished_at", "lease_token")
_IDENTITY_FIELDS = ("definition_id", "trigger", "scheduled_for", "attempt", "retry_of")


def install_run_audit(conn: Connection) -> None:
    """Record, in ``test_audit.run_changes``, every status change of a run, every change
    to a terminal run's outcome, every change to a run's identity and every deletion.
    Same transaction as the change itself, so nothing escapes it, crash or not."""
    conn.execute(_AUDIT_DDL)


def _changes(conn: Connection) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT run_id, op, at, old_row, new_row FROM test_audit.run_changes ORDER BY id"
    ).fetchall()


def _launch_deferred(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The one way back from RUNNING: a claim whose Job the API server could not take is
    undone (sql/queries/dispatch.sql, requeue_deferred_launch) — QUEUED again, no start,
    the attempt unspent, the error saying why — and only before any heartbeat."""
    return (
        (old["status"], new["status"]) == ("RUNNING", "QUEUED")
        and old["heartbeat_at"] is None
        and new["started_at"] is None
        and new["attempt"] == old["attempt"]
        and str(new["error"] or "").startswith("launch deferred: ")
    )


def terminal_statuses_final(conn: Connection) -> list[str]:
    """I4 from the audit trail: only legal transitions; a terminal run never changed."""
    problems = []
    for change in _changes(conn):
        old, new = change["old_row"], change["new_row"]
        if change["op"] != "UPDATE":
            continue
        run = f"run {change['run_id']}"
        if old["status"] != new["status"]:
            if (old["status"], new["status"]) not in LEGAL_TRANSITIONS and not _launch_deferred(
                old, new
            ):
                problems.append(
                    f"{run}: status {old['status']}/{old['reason']} overwritten by"
                    f" {new['status']}/{new['reason']} at {change['at']}"
                )
        elif old["status"] in TERMINAL:
            changed = [name for name in _FINAL_FIELDS if old[name] != new[name]]
            if changed:
                detail = ", ".join(f"{name} {old[name]!r} -> {new[name]!r}" for name in changed)
                problems.append(
                    f"{run}: terminal {old['status']} rewritten at {change['at']}: {detail}"
                )
    return problems


def attempts_keep_their_trail(conn: Connection) -> list[str]:
    """I5: every attempt keeps its own row, reason and error; retry chains have no gaps.

    - no run row was deleted or turned into another attempt (audit trail);
    - every failed, cancelled or skipped run says why (reason) and what (error);
    - attempt 1 is never a retry, attempt n > 1 always is, and it points at a FAILED
      attempt n - 1 of the same definition, scheduled no earlier than that one ended;
    - every failed attempt was settled, and each one the definition's retry policy
      retries has exactly one successor (unique, so "exactly one" means "one").
    """
    problems = []
    for change in _changes(conn):
        run = f"run {change['run_id']}"
        if change["op"] == "DELETE":
            problems.append(f"{run} ({change['old_row']['status']}) was deleted at {change['at']}")
            continue
        old, new = change["old_row"], change["new_row"]
        changed = [name for name in _IDENTITY_FIELDS if old[name] != new[name]]
        if changed:
            detail = ", ".join(f"{name} {old[name]!r} -> {new[name]!r}" for name in changed)
            problems.append(f"{run} was rewritten into another attempt at {change['at']}: {detail}")
    rows = conn.execute(
        "SELECT r.id, r.definition_id, r.status, r.reason, r.error, r.trigger, r.attempt,"
        " r.retry_of, r.retry_hint, r.scheduled_for, r.finished_at, r.settled_at,"
        " d.retry_policy, d.deleted_at"
        " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
    ).fetchall()
    by_id = {row["id"]: row for row in rows}
    retried = {row["retry_of"] for row in rows if row["retry_of"] is not None}
    for row in rows:
        run = f"run {row['id']}"
        if row["status"] in ("FAILED", "CANCELLED", "SKIPPED") and not (
            row["reason"] and row["error"]
        ):
            problems.append(
                f"{run} is {row['status']} with reason {row['reason']!r} and error {row['error']!r}"
            )
        if (row["trigger"] == "retry") != (row["attempt"] > 1) or (
            (row["trigger"] == "retry") != (row["retry_of"] is not None)
        ):
            problems.append(
                f"{run}: trigger {row['trigger']}, attempt {row['attempt']}, retry_of"
                f" {row['retry_of']} do not agree"
            )
        if row["retry_of"] is not None:
            previous = by_id.get(row["retry_of"])
            if previous is None:
                problems.append(f"{run} retries run {row['retry_of']}, which does not exist")
            elif (
                previous["status"] != "FAILED"
                or previous["definition_id"] != row["definition_id"]
                or previous["attempt"] + 1 != row["attempt"]
                or previous["finished_at"] is None
                or row["scheduled_for"] < previous["finished_at"]
            ):
                problems.append(
                    f"{run} (attempt {row['attempt']}, scheduled {row['scheduled_for']}) does not"
                    f" follow run {previous['id']} ({previous['status']}, attempt"
                    f" {previous['attempt']}, finished {previous['finished_at']})"
                )
        if row["status"] in ("COMPLETED", "FAILED", "CANCELLED") and row["settled_at"] is None:
            problems.append(f"{run} ended {row['status']} but was never settled")
        if (
            row["status"] == "FAILED"
            and row["settled_at"] is not None
            and row["deleted_at"] is None
            and row["id"] not in retried
            and RetryPolicy.from_json(row["retry_policy"])
            .decide(
                reason=row["reason"],
                attempt=row["attempt"],
                hint=row["retry_hint"],
                rng=random.Random(0),
            )
            .retry
        ):
            problems.append(
                f"{run} failed with {row['reason']} (attempt {row['attempt']}) and its retry"
                " policy allows another attempt, but none was made"
            )
    return problems


# A final outcome: settled, and either a success or a failure that no retry follows.
_FINAL_OUTCOMES = """
    SELECT u.id, u.definition_id, ud.namespace, ud.name, u.settled_at,
           CASE u.status WHEN 'COMPLETED' THEN 'Succeeded' ELSE 'Failed' END AS outcome
    FROM pgsched.job_runs AS u
    JOIN pgsched.job_definitions AS ud ON ud.id = u.definition_id
    WHERE u.settled_at IS NOT NULL
      AND (u.status = 'COMPLETED'
           OR (u.status = 'FAILED'
               AND NOT EXISTS (SELECT FROM pgsched.job_runs AS x WHERE x.retry_of = u.id)))
"""


def chained_exactly_once(conn: Connection) -> list[str]:
    """I10: every final matching outcome of an upstream run yields exactly one downstream
    run (``afterMode: Any``), or one arrival (``All``) that at most one downstream run
    consumed; no downstream run exists without a final matching upstream run.

    Edges count from the downstream definition's creation: an upstream run settled before
    the downstream existed triggers nothing."""
    problems = []
    expected = conn.execute(
        f"WITH final AS ({_FINAL_OUTCOMES})"
        " SELECT f.id AS upstream, d.id AS downstream, d.name, d.after_mode,"
        "   (SELECT count(*) FROM pgsched.job_runs AS r WHERE r.definition_id = d.id"
        "      AND r.trigger = 'upstream' AND r.upstream_run_id = f.id) AS runs,"
        "   (SELECT count(*) FROM pgsched.chain_arrivals AS a WHERE a.downstream_id = d.id"
        "      AND a.upstream_run_id = f.id) AS arrivals"
        " FROM final AS f"
        " JOIN pgsched.job_dependencies AS dep ON dep.upstream_name = f.name"
        "   AND dep.on_outcome IN (f.outcome, 'Finished')"
        " JOIN pgsched.job_definitions AS d ON d.id = dep.downstream_id"
        "   AND d.namespace = f.namespace AND d.deleted_at IS NULL"
        "   AND f.settled_at >= d.created_at"
    ).fetchall()
    for row in expected:
        what = f"upstream run {row['upstream']} → {row['name']}"
        if row["after_mode"] == "Any" and row["runs"] != 1:
            problems.append(f"{what}: {row['runs']} downstream runs, expected exactly 1")
        if row["after_mode"] == "All" and row["arrivals"] != 1:
            problems.append(f"{what}: {row['arrivals']} fan-in arrivals, expected exactly 1")
    orphans = conn.execute(
        f"WITH final AS ({_FINAL_OUTCOMES})"
        " SELECT r.id, d.name, r.upstream_run_id FROM pgsched.job_runs AS r"
        " JOIN pgsched.job_definitions AS d ON d.id = r.definition_id"
        " WHERE r.trigger = 'upstream' AND NOT EXISTS ("
        "   SELECT FROM final AS f"
        "   JOIN pgsched.job_dependencies AS dep ON dep.upstream_name = f.name"
        "     AND dep.downstream_id = d.id AND dep.on_outcome IN (f.outcome, 'Finished')"
        "   WHERE f.id = r.upstream_run_id AND f.namespace = d.namespace)"
    ).fetchall()
    problems += [
        f"run {row['id']} of {row['name']} names upstream run {row['upstream_run_id']},"
        " which is not a final matching outcome of one of its upstreams"
        for row in orphans
    ]
    partial = conn.execute(
        "SELECT a.consumed_by, d.name, count(DISTINCT a.upstream_name) AS n"
        " FROM pgsched.chain_arrivals AS a JOIN pgsched.job_definitions AS d"
        "   ON d.id = a.downstream_id"
        " WHERE a.consumed_by IS NOT NULL GROUP BY a.consumed_by, a.downstream_id, d.name"
        " HAVING count(DISTINCT a.upstream_name) < (SELECT count(*)"
        "   FROM pgsched.job_dependencies AS dep WHERE dep.downstream_id = a.downstream_id)"
    ).fetchall()
    problems += [
        f"fan-in run {row['consumed_by']} of {row['name']} consumed arrivals of only"
        f" {row['n']} upstreams"
        for row in partial
    ]
    return problems
