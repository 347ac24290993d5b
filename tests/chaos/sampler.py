"""Watching the database while chaos runs: what the after-the-fact checks cannot see.

A sampler thread reads the live state every ``interval`` seconds (reconnecting through
database restarts) and reports each violation once:

- I2 live: a definition with more RUNNING runs than its cap right now;
- I9 live: a concurrency pool with more RUNNING runs (across its jobs) than its limit;
- I3 live: a RUNNING run silent for longer than its heartbeat (or orphan) timeout plus the
  stall slack (a run the operator sees launching: longer than its start bound plus the slack) — the reaper should have ended it, or asked for its verdict — or a due
  QUEUED run waiting longer than the queue bound plus the time the API server was down
  meanwhile, or — if longer — the time its job's cap was held by runs that went silent and
  awaited their verdicts (they keep their places until the API answers and the Job
  controller has caught up) or by runs launching (claimed, their workload not started:
  after a long API outage the node starts a backlog of pods at once); the rules for those
  runs bound that time;
- I3 live, runs awaiting a verdict (``outcome_pending_at``, container runs: the reaper
  asks the API instead of calling silence death, I8): such a run may stay RUNNING as long
  as its Job has not recorded an outcome — the Job controller decides, and after an API
  server restart it can take a minute to catch up. Once the job side's own record exists
  (``evidence``: the driver's Job watch saw the Job finished, or deleted), the verdict is
  due within the verdict interval plus the time the API server was down meanwhile
  (``api_down``: the driver knows its outages) plus the slack; later is a violation.
  A run pending while its Job never finishes is not lost either: the drain waits for
  every run to end and fails the run if one does not;
- the time no operator replica was there at all (``operator_away``: the driver knows its
  ``replicas_down`` and ``replicas_pause``) is allowed on top of each bound above: nobody
  reaps, judges or dispatches then, and the reaper counts no silence across it;
- I4 live: every terminal row it sees is remembered (status, reason, error, finished_at);
  seeing it again with anything changed — in a later sample, or in the final state — is an
  overwritten terminal status. One exception, across a failover only (the database's WAL
  timeline changed between the two sightings): an end the failover lost and recorded again
  with the same status and reason (from the run's Job) has a new ``finished_at``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgsched.db.connection import Connection
from pgsched.db.session import Session

log = logging.getLogger(__name__)

_OVER_CAP = """
SELECT r.definition_id, count(*) AS running, d.max_concurrent_runs AS cap
FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id
WHERE r.status = 'RUNNING'
GROUP BY r.definition_id, d.max_concurrent_runs
HAVING count(*) > d.max_concurrent_runs
"""
_OVER_POOL_LIMIT = """
SELECT d.pool, count(*) AS running, p.concurrency_limit AS pool_limit
FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id
JOIN pgsched.job_pools p ON p.namespace || '/' || p.name = d.pool
WHERE r.status = 'RUNNING'
GROUP BY d.pool, p.concurrency_limit
HAVING count(*) > p.concurrency_limit
"""
# A run the operator sees launching (its workload not started, observed within its
# heartbeat timeout: the reaper's own rule) is bounded by its start bound instead:
# silent since its claim, allowed until run_starts.bound_at.
_SILENT = """
WITH running AS (
    SELECT r.*, s.bound_at,
           s.bound_at IS NOT NULL AND pgsched.observed_launching(
               r.id, now() - make_interval(secs => d.heartbeat_timeout_seconds)) AS launching,
           d.orphan_timeout_seconds, d.heartbeat_timeout_seconds
    FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id
    LEFT JOIN pgsched.run_starts s ON s.run_id = r.id
    WHERE r.status = 'RUNNING'
)
SELECT id, definition_id,
       extract(epoch FROM now() - CASE WHEN launching THEN started_at
                                       ELSE coalesce(heartbeat_at, started_at) END) AS silent,
       extract(epoch FROM coalesce(heartbeat_at, started_at)) AS silent_since,
       launching, extract(epoch FROM started_at) AS claimed_at,
       CASE WHEN launching THEN ceil(extract(epoch FROM bound_at - started_at))::integer
            WHEN heartbeat_at IS NULL THEN orphan_timeout_seconds
            ELSE heartbeat_timeout_seconds END AS allowed,
       extract(epoch FROM outcome_pending_at) AS pending_at, extract(epoch FROM now()) AS now
FROM running
"""
_WAITING = """
SELECT id, definition_id, extract(epoch FROM now() - scheduled_for) AS waited,
       extract(epoch FROM scheduled_for) AS due_at, extract(epoch FROM now()) AS now
FROM pgsched.job_runs WHERE status = 'QUEUED' AND scheduled_for <= now()
ORDER BY scheduled_for LIMIT 20
"""
_TERMINAL = """
SELECT id, status, reason, error, finished_at FROM pgsched.job_runs
WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'SKIPPED')
  AND (%(since)s::timestamptz IS NULL OR finished_at > %(since)s::timestamptz - interval '60 seconds')
"""


def _outcome(row: dict[str, Any]) -> tuple[object, ...]:
    return (row["status"], row["reason"], row["error"], row["finished_at"])


def _timeline(conn: Connection) -> int:
    row = conn.execute("SELECT pgsched.current_timeline() AS timeline").fetchone()
    assert row is not None
    return int(row["timeline"])


@dataclass
class Sampled:
    samples: int = 0
    violations: dict[str, list[str]] = field(
        default_factory=lambda: {"I2": [], "I3": [], "I4": [], "I9": []}
    )
    terminal: dict[int, tuple[object, ...]] = field(default_factory=dict)
    max_overdue_seconds: float = 0.0  # longest silence beyond a heartbeat/orphan timeout
    max_verdict_wait_seconds: float = 0.0  # longest time a run awaited its verdict
    max_verdict_late_seconds: float = 0.0  # … after its Job had recorded the outcome
    max_queue_wait_seconds: float = 0.0
    peak_running: int = 0
    # Ends seen, lost in a failover and recorded again with the same status and reason.
    recorded_again: list[int] = field(default_factory=list)


class Sampler(threading.Thread):
    def __init__(
        self,
        dsn: str,
        *,
        stall_slack_seconds: float,
        queue_bound_seconds: float,
        interval: float = 0.5,
        evidence: Callable[[], dict[int, float]] = dict,
        api_down: Callable[[float, float], float] = lambda since, until: 0.0,
        verdict_interval: float = 0.0,
        operator_away: Callable[[float, float], float] = lambda since, until: 0.0,
    ) -> None:
        super().__init__(name="chaos-sampler", daemon=True)
        self._session = Session.for_dsn(dsn, application_name="chaos-sampler")
        self._slack = stall_slack_seconds
        self._queue_bound = queue_bound_seconds
        self._interval = interval
        self._evidence = evidence
        self._api_down = api_down
        self._verdict_interval = verdict_interval
        self._operator_away = operator_away
        self._stop_event = threading.Event()
        self._seen: set[str] = set()
        # (run id, why) → (definition id, held since, last seen holding), epoch s: runs
        # holding a place under their job's cap while awaiting a verdict or launching.
        self._holds: dict[tuple[int, str], tuple[object, float, float]] = {}
        self._since: object = None
        # The database's WAL timeline at this sample, and at each terminal row's first sight.
        self._timeline: int | None = None
        self._seen_on: dict[int, int | None] = {}
        self.result = Sampled()

    def stop(self) -> Sampled:
        self._stop_event.set()
        self.join(timeout=30)
        self._session.close()
        return self.result

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self._session.run(self.sample)
            except psycopg.Error as error:
                log.debug("sample failed (database restarting?): %s", error)
            self._stop_event.wait(self._interval)

    def _report(self, invariant: str, key: str, message: str) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self.result.violations[invariant].append(message)

    def sample(self, conn: Connection) -> None:
        result = self.result
        self._timeline = _timeline(conn)
        over_cap = conn.execute(_OVER_CAP).fetchall()
        over_pool_limit = conn.execute(_OVER_POOL_LIMIT).fetchall()
        silent = conn.execute(_SILENT).fetchall()
        waiting = conn.execute(_WAITING).fetchall()
        terminal = conn.execute(_TERMINAL, {"since": self._since}).fetchall()
        for row in over_cap:
            self._report(
                "I2",
                f"cap:{row['definition_id']}:{row['running']}",
                f"live: definition {row['definition_id']} had {row['running']} RUNNING runs,"
                f" cap {row['cap']}",
            )
        for row in over_pool_limit:
            self._report(
                "I9",
                f"pool:{row['pool']}:{row['running']}",
                f"live: pool {row['pool']} had {row['running']} RUNNING runs,"
                f" limit {row['pool_limit']}",
            )
        result.peak_running = max(result.peak_running, len(silent))
        for row in silent:
            # Silent, then awaiting its verdict: it holds a place under its job's cap from
            # its last sign of life. Launching: from its claim. Both phases are bounded by
            # the rules below, so the wait they cause is bounded too.
            if row["pending_at"] is not None:
                self._hold(row, "verdict", float(row["silent_since"]))
            if row["launching"]:
                self._hold(row, "launching", float(row["claimed_at"]))
        evidence = self._evidence() if any(r["pending_at"] for r in silent) else {}
        for row in silent:
            if row["pending_at"] is None:
                self._check_silence(row)
            else:
                self._check_verdict(row, evidence.get(row["id"]))
        for row in waiting:
            waited = float(row["waited"])
            result.max_queue_wait_seconds = max(result.max_queue_wait_seconds, waited)
            # While the API server is down, runs awaiting their verdicts keep their caps
            # (RUNNING until their Job's outcome can be read), so a capped run waits too.
            due_at, now = float(row["due_at"]), float(row["now"])
            down = self._api_down(due_at, now)
            away = self._operator_away(due_at, now)  # nothing dispatches then either
            held = self._held(row["definition_id"], due_at, now)
            if waited > self._queue_bound + max(down, held) + away:
                self._report(
                    "I3",
                    f"queued:{row['id']}",
                    f"live: run {row['id']} due and QUEUED for {waited:.0f}s"
                    f" (bound {self._queue_bound:g}s + API server down {down:.0f}s or its"
                    f" job's cap held by runs awaiting verdicts or launching {held:.0f}s"
                    " meanwhile" + (f", + no replica there {away:.0f}s" if away else "") + ")",
                )
        for row in terminal:
            self._remember(row, when="later sample")
            if self._since is None or row["finished_at"] > self._since:
                self._since = row["finished_at"]
        result.samples += 1

    def _hold(self, row: dict[str, Any], why: str, since: float) -> None:
        self._holds[(row["id"], why)] = (row["definition_id"], since, float(row["now"]))

    def _held(self, definition_id: object, since: float, until: float) -> float:
        """How long, between two epoch times, runs of this definition awaiting a verdict or
        launching held a place under the cap (the union of those spans)."""
        spans = sorted(
            (max(start, since), min(end, until))
            for held_for, start, end in self._holds.values()
            if held_for == definition_id and end > since and start < until
        )
        total, reached = 0.0, since
        for start, end in spans:
            total += max(0.0, end - max(start, reached))
            reached = max(reached, end)
        return total

    def _check_silence(self, row: dict[str, Any]) -> None:
        # While no replica is there nobody reaps, and the reaper counts no silence across
        # that time (``pgsched.silent_since``): it is allowed on top.
        away = self._operator_away(float(row["silent_since"]), float(row["now"]))
        overdue = float(row["silent"]) - row["allowed"] - away
        self.result.max_overdue_seconds = max(self.result.max_overdue_seconds, overdue)
        if overdue > self._slack:
            self._report(
                "I3",
                f"silent:{row['id']}",
                f"live: run {row['id']} RUNNING and silent for {float(row['silent']):.0f}s"
                f" (timeout {row['allowed']}s + slack {self._slack:g}s"
                + (f" + no replica there {away:.0f}s" if away else "")
                + "): not reaped, and no verdict asked",
            )

    def _check_verdict(self, row: dict[str, Any], recorded: float | None) -> None:
        """A run awaiting its verdict; ``recorded``: when its Job's outcome appeared."""
        now, pending_at = float(row["now"]), float(row["pending_at"])
        result = self.result
        result.max_verdict_wait_seconds = max(result.max_verdict_wait_seconds, now - pending_at)
        if recorded is None:
            return  # the Job has no outcome yet: the verdict waits for it
        due = max(recorded, pending_at)
        down = self._api_down(due, now)
        away = self._operator_away(due, now)
        late = now - due - self._verdict_interval - down - away
        result.max_verdict_late_seconds = max(result.max_verdict_late_seconds, late)
        if late > self._slack:
            self._report(
                "I3",
                f"verdict:{row['id']}",
                f"live: run {row['id']} still RUNNING awaiting its verdict {now - due:.0f}s"
                f" after its Job recorded the outcome (verdict interval"
                f" {self._verdict_interval:g}s + API server down {down:.0f}s"
                + (f" + no replica there {away:.0f}s" if away else "")
                + " meanwhile +"
                f" slack {self._slack:g}s): not settled",
            )

    def _remember(self, row: dict[str, Any], *, when: str) -> None:
        known = self.result.terminal.setdefault(row["id"], _outcome(row))
        seen_on = self._seen_on.setdefault(row["id"], self._timeline)
        if known[:2] == _outcome(row)[:2] and seen_on != self._timeline:
            # Lost with a failover's last commits and recorded again, the same outcome.
            self.result.terminal[row["id"]] = _outcome(row)
            self._seen_on[row["id"]] = self._timeline
            if known != _outcome(row):
                self.result.recorded_again.append(row["id"])
        elif known != _outcome(row):
            self._report(
                "I4",
                f"changed:{row['id']}:{_outcome(row)}",
                f"run {row['id']} was {known[0]}/{known[1]} (finished {known[3]}) and is"
                f" {row['status']}/{row['reason']} (finished {row['finished_at']}) in a {when}",
            )

    def compare_final(self, conn: Connection) -> None:
        """I4 after the run: every terminal row sampled is still exactly as it was seen."""
        self._timeline = _timeline(conn)
        rows = conn.execute(
            "SELECT id, status, reason, error, finished_at FROM pgsched.job_runs"
            " WHERE id = ANY(%s)",
            [list(self.result.terminal)],
        ).fetchall()
        for row in rows:
            self._remember(row, when="final state")
