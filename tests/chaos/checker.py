"""After the run: every invariant checked against the final state, and the report.

The checks themselves live in ``tests/invariants.py`` (shared with the race and fault
tests); this module runs all of them, adds what the sampler saw live and what the variant
recorded outside the database (launches, Jobs), and writes the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import invariants
from chaos.sampler import Sampled
from pgsched.db.connection import Connection

INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I8", "I9", "I10")


def check(
    conn: Connection,
    sampled: Sampled,
    *,
    launches: Iterable[tuple[int, str]],
    slack_seconds: float,
    executions: Iterable[dict[str, Any]] = (),
    verdict_allowance: Callable[[datetime, datetime], float] | None = None,
    silence_allowance: Callable[[datetime, datetime], float] | None = None,
) -> dict[str, list[str]]:
    """Every invariant over the database; ``launches`` are (run id, lease token) pairs,
    ``executions`` the job side's own log of what it ran (see ``executions_match``),
    ``verdict_allowance`` what a silent run's verdict may take and ``silence_allowance``
    how much later than its timeout a silent run may be reaped (see ``deadlines_kept``)."""
    launched = list(launches)
    return {
        "I8": executions_match(conn, list(executions)),
        "I1": invariants.no_double_launch(run_id for run_id, _ in launched)
        + invariants.launches_hold_their_claim(conn, launched)
        + invariants.no_duplicate_occurrence(conn),
        "I2": invariants.never_over_cap(conn) + sampled.violations["I2"],
        "I3": invariants.every_attempt_terminal(conn)
        + invariants.deadlines_kept(
            conn,
            slack_seconds=slack_seconds,
            verdict_allowance=verdict_allowance,
            silence_allowance=silence_allowance,
        )
        + sampled.violations["I3"],
        "I4": invariants.terminal_statuses_final(conn) + sampled.violations["I4"],
        "I5": invariants.attempts_keep_their_trail(conn),
        "I10": invariants.chained_exactly_once(conn),
        # I2 for concurrency pools: at no instant more RUNNING runs than the pool's limit.
        "I9": invariants.never_over_pool_limit(conn) + sampled.violations["I9"],
    }


def executions_match(conn: Connection, executions: list[dict[str, Any]]) -> list[str]:
    """The job side's evidence against the final tables (I8, and lost acknowledgements).

    ``executions`` are the job processes' own records — ``{"run_id", "lease", "event":
    "end", "status", "acknowledged"}`` when a job finished its work — kept outside the
    database, so they survive what the database forgets (a commit lost in a failover, a
    bug that rewrites history). Violations:

    - an outcome acknowledged to its job (the fenced finish said yes) that the final row
      does not show;
    - work that ran to success and was executed again: a retry of a run whose job
      succeeded, or one run id whose work was completed by two executions.
    """
    ends = [item for item in executions if item.get("event") == "end"]
    if not ends:
        return []
    ids = sorted({int(item["run_id"]) for item in ends})
    rows = {
        row["id"]: row
        for row in conn.execute(
            "SELECT r.id, r.status, r.reason,"
            " (SELECT n.id FROM pgsched.job_runs AS n WHERE n.retry_of = r.id) AS retried_as"
            " FROM pgsched.job_runs AS r WHERE r.id = ANY(%s)",
            [ids],
        )
    }
    problems = []
    completions: dict[int, set[str]] = {}
    for item in ends:
        run_id = int(item["run_id"])
        row = rows.get(run_id)
        final = f"{row['status']}/{row['reason']}" if row else "missing"
        if item.get("acknowledged") and (row is None or row["status"] != item["status"]):
            problems.append(
                f"run {run_id}: {item['status']} was acknowledged to its job (lease"
                f" {item['lease']}), the final table says {final}"
            )
        if item["status"] == "COMPLETED":
            completions.setdefault(run_id, set()).add(str(item["lease"]))
            # Only an acknowledged success binds: a job paused past its heartbeat timeout
            # that finishes after its lease was lost was told so (not acknowledged), and
            # with the job host (no Job status to consult) that retry is the documented
            # at-least-once case, not a lost outcome.
            if item.get("acknowledged") and row is not None and row["retried_as"] is not None:
                problems.append(
                    f"run {run_id}: its job succeeded, yet it ended {final} and was executed"
                    f" again as run {row['retried_as']}"
                )
    for run_id, leases in sorted(completions.items()):
        if len(leases) > 1:
            problems.append(
                f"run {run_id}: its work was completed by {len(leases)} executions (leases"
                f" {', '.join(sorted(leases))})"
            )
    return problems


def run_counts(conn: Connection) -> dict[str, Any]:
    row = conn.execute(
        "SELECT count(*) AS total,"
        " count(*) FILTER (WHERE trigger = 'schedule') AS materialized,"
        " count(*) FILTER (WHERE trigger = 'manual') AS manual,"
        " count(*) FILTER (WHERE trigger = 'retry') AS retries,"
        " count(*) FILTER (WHERE trigger = 'upstream') AS chained,"
        " count(*) FILTER (WHERE started_at IS NOT NULL) AS started,"
        " count(*) FILTER (WHERE status = 'COMPLETED') AS completed,"
        " count(*) FILTER (WHERE status = 'FAILED') AS failed,"
        " count(*) FILTER (WHERE status = 'CANCELLED') AS cancelled,"
        " count(*) FILTER (WHERE status = 'SKIPPED') AS skipped"
        " FROM pgsched.job_runs"
    ).fetchone()
    assert row is not None
    reasons = conn.execute(
        "SELECT status || '/' || reason AS what, count(*) AS n FROM pgsched.job_runs"
        " WHERE reason IS NOT NULL GROUP BY 1 ORDER BY 2 DESC"
    ).fetchall()
    return {**row, "by_reason": {item["what"]: item["n"] for item in reasons}}


def infrastructure_failures(conn: Connection, *, limit: int = 200) -> list[dict[str, Any]]:
    """The runs the faults ended (reaped, failed launches), for reading a report later."""
    rows = conn.execute(
        "SELECT id, definition_id, attempt, trigger, status, reason, error, started_at,"
        " heartbeat_at, finished_at FROM pgsched.job_runs"
        " WHERE reason IN ('HeartbeatLost', 'Orphaned', 'LaunchFailed', 'JobDeleted')"
        " ORDER BY id LIMIT %s",
        [limit],
    ).fetchall()
    return [{key: str(value) for key, value in row.items()} for row in rows]


@dataclass
class Report:
    variant: str
    seed: int
    chaos_seconds: float
    drain_seconds: float
    drained: bool
    faults: dict[str, int]
    fault_log: list[dict[str, object]]
    replica_restarts: int
    runs: dict[str, Any]
    launches: int
    samples: int
    max_queue_wait_seconds: float
    max_overdue_seconds: float
    violations: dict[str, list[str]]
    planted: str | None = None
    work_dir: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    infrastructure_failures: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def summary(self) -> str:
        runs = self.runs
        lines = [
            f"chaos {self.variant}: seed {self.seed} (replay: PGSCHED_CHAOS_SEED={self.seed})"
            + (f", planted bug: {self.planted}" if self.planted else ""),
            f"  {self.chaos_seconds:.0f}s of chaos, drained in {self.drain_seconds:.0f}s"
            + ("" if self.drained else " (NOT drained)"),
            "  faults: "
            + ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items()))
            + f" (total {sum(self.faults.values())}); replica restarts {self.replica_restarts}",
            f"  runs: {runs['total']} rows — materialized {runs['materialized']}, manual"
            f" {runs['manual']}, retries {runs['retries']}; started {runs['started']},"
            f" completed {runs['completed']}, failed {runs['failed']}, cancelled"
            f" {runs['cancelled']}, skipped {runs['skipped']}; launches {self.launches}",
            "  reasons: " + ", ".join(f"{k} {v}" for k, v in runs["by_reason"].items()),
            f"  sampled {self.samples} times: longest due-queue wait"
            f" {self.max_queue_wait_seconds:.1f}s, longest silence past a timeout"
            f" {self.max_overdue_seconds:.1f}s",
        ]
        for key, value in self.extra.items():
            lines.append(f"  {key}: {value}")
        # The invariants every variant checks, then the variant's own checks by name.
        for invariant in [*INVARIANTS, *sorted(set(self.violations) - set(INVARIANTS))]:
            found = self.violations.get(invariant, [])
            lines.append(f"  {invariant}: {'ok' if not found else f'{len(found)} violations'}")
            lines += [f"    - {item}" for item in found[:10]]
            if len(found) > 10:
                lines.append(f"    … and {len(found) - 10} more (see the JSON report)")
        return "\n".join(lines)

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        planted = f"-planted-{self.planted}" if self.planted else ""
        path = directory / f"{self.variant}{planted}-{stamp}-{self.seed}.json"
        path.write_text(json.dumps({**asdict(self), "ok": self.ok}, indent=2, default=str))
        return path
