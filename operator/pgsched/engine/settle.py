"""Settling terminal runs: retries as new rows, failure streaks, auto-suspension.

A run can end in many places — its own worker, the reaper, a failed launch, the Kubernetes
outcome watch — but its consequences are applied in exactly one: this phase, which picks up
terminal runs not yet settled. That keeps the retry rule in one place and makes it
crash-safe: the retry row, the streak update and ``settled_at`` commit together, and a
failed attempt is retried at most once even with two leaders.

A run's outcome becomes *final* here, and only here, so the downstream runs it triggers
(``chain``) are queued in the same transaction. A retry is a new QUEUED row scheduled after
its backoff; every decision, and why, is written on the terminal run (``retry_decision``)
for ``pgsched describe`` and the Events.

In full: docs/architecture.md, "Settling".
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from pgsched import logs
from pgsched.db import clock, queries
from pgsched.db.connection import Connection
from pgsched.engine import chain
from pgsched.engine.models import Definition, Run
from pgsched.engine.retry import RetryPolicy

log = logging.getLogger(__name__)

_SYSTEM_RANDOM = random.SystemRandom()


@dataclass(frozen=True)
class Retried:
    failed: Run
    retry_id: int
    delay: timedelta


@dataclass
class SettleResult:
    settled: int = 0
    retried: list[Retried] = field(default_factory=list)
    final_failures: list[Run] = field(default_factory=list)
    auto_suspended: list[tuple[UUID, str]] = field(default_factory=list)
    chained: list[chain.Chained] = field(default_factory=list)


def run_once(
    conn: Connection,
    *,
    now: datetime | None = None,
    batch_size: int = 500,
    rng: random.Random = _SYSTEM_RANDOM,
) -> SettleResult:
    result = SettleResult()
    while True:
        count = _settle_batch(conn, result, now=now, batch_size=batch_size, rng=rng)
        if count < batch_size:
            return result


def _settle_batch(
    conn: Connection,
    result: SettleResult,
    *,
    now: datetime | None,
    batch_size: int,
    rng: random.Random,
) -> int:
    with conn.transaction():
        at = clock.now(conn, now)
        runs = [
            Run.from_row(row)
            for row in conn.execute(queries.get("unsettled_runs"), {"limit": batch_size})
        ]
        if not runs:
            return 0
        owners = {
            row["id"]: Definition.from_row(row)
            for row in conn.execute(
                queries.get("definitions_by_ids"),
                {"ids": sorted({run.definition_id for run in runs})},
            )
        }
        streaks = {
            definition_id: owners[definition_id].consecutive_failures for definition_id in owners
        }
        touched: set[UUID] = set()
        finals: list[chain.Final] = []
        decisions: dict[int, str | None] = {}
        not_retried: list[int] = []
        for run in runs:
            definition = owners[run.definition_id]
            decisions[run.id] = None
            if run.status == "COMPLETED":
                streaks[definition.id] = 0
                touched.add(definition.id)
                finals.append(chain.Final(run.id, "Succeeded"))
            elif run.status == "CANCELLED":
                decisions[run.id] = "not retried: cancelled runs are never retried"
            elif run.status == "FAILED":
                retried, decisions[run.id] = _retry(conn, run, definition, now=at, rng=rng)
                if isinstance(retried, Retried):
                    result.retried.append(retried)
                elif retried is None:
                    result.final_failures.append(run)
                    not_retried.append(run.id)
                    streaks[definition.id] += 1
                    touched.add(definition.id)
                    finals.append(chain.Final(run.id, "Failed"))
        result.chained += chain.fire(conn, finals, now=at)
        if not_retried:  # before the suspension these failures may cause (its note follows)
            conn.execute(queries.get("announce_final_failures"), {"ids": not_retried})
        if touched:
            ids = sorted(touched)
            suspended = conn.execute(
                queries.get("update_failure_streaks"),
                {"ids": ids, "streaks": [streaks[i] for i in ids], "now": at},
            ).fetchall()
            suspended_now = {row["id"]: row for row in suspended if row["suspended_now"]}
            for definition_id, row in suspended_now.items():
                log.warning(
                    "auto-suspended %s: %s", owners[definition_id].key, row["auto_suspend_reason"]
                )
                result.auto_suspended.append((definition_id, row["auto_suspend_reason"]))
            if suspended_now:
                # No run changed status here, so nothing else would tell the publisher that
                # these ScheduledJobs' status (the Suspended condition) is stale.
                conn.execute(
                    queries.get("announce_suspensions"),
                    {
                        "ids": [
                            run.id
                            for run in result.final_failures
                            if run.definition_id in suspended_now
                        ]
                    },
                )
        conn.execute(
            queries.get("mark_settled"),
            {"ids": list(decisions), "decisions": list(decisions.values()), "now": at},
        )
        result.settled += len(runs)
        return len(runs)


def _retry(
    conn: Connection, run: Run, definition: Definition, *, now: datetime, rng: random.Random
) -> tuple[Retried | bool | None, str]:
    """The retry queued now, True if it was queued before (a replayed settle or another
    leader: the run is not final), or None if the failure is final; and the decision in
    words, for the run's ``retry_decision``."""
    if definition.deleted_at is not None:
        return None, "not retried: the ScheduledJob was deleted"
    policy = RetryPolicy.from_json(definition.retry_policy)
    decision = policy.decide(reason=run.reason, attempt=run.attempt, hint=run.retry_hint, rng=rng)
    log_run = logs.for_run(log, run, definition)
    if not decision.retry:
        log_run.info(
            "run %s (%s, attempt %s) not retried: %s",
            run.id,
            definition.key,
            run.attempt,
            decision.why,
        )
        return None, f"not retried: {decision.why}"
    scheduled_for = now + decision.delay
    deadline = definition.starting_deadline_seconds
    row = conn.execute(
        queries.get("insert_retry"),
        {
            "definition_id": run.definition_id,
            "scheduled_for": scheduled_for,
            "deadline_at": scheduled_for + timedelta(seconds=deadline) if deadline else None,
            "attempt": run.attempt + 1,
            "retry_of": run.id,
            "upstream_run_id": run.upstream_run_id,
        },
    ).fetchone()
    if row is None:  # retried before: a replayed settle, or another leader was first
        return True, "retried by another replica"
    log_run.info(
        "run %s (%s) failed with %s; attempt %s queued as run %s in %.1fs",
        run.id,
        definition.key,
        run.reason,
        run.attempt + 1,
        row["id"],
        decision.delay.total_seconds(),
    )
    retried = Retried(failed=run, retry_id=row["id"], delay=decision.delay)
    return retried, (
        f"retried as run {row['id']} (attempt {run.attempt + 1})"
        f" in {decision.delay.total_seconds():.0f}s: {decision.why}"
    )
