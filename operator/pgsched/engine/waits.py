"""What a waiting run waits for, in the words every screen uses (I13).

A QUEUED run is claimed once its time has come, its ScheduledJob has room under
``maxConcurrentRuns``, its ConcurrencyPool (if it names one) exists and has room, and a
dispatch reaches it; a launch the API server could not take puts it back (``LaunchDeferred``,
``engine/dispatch.py``). A RUNNING run whose Job an admission queue keeps suspended waits
for admission (``engine/starts.py``). ``pgsched describe``, the UI's run and "why" pages,
the ScheduledJob's ``status.waiting`` and the ``RunWaiting`` Event all show the
:class:`Wait` computed here — "pool etl (2 of 2 running: runs 17, 18)",
"maxConcurrentRuns 1 (run 17 running)", "admission (Kueue queue team-a)" — and, when
the run has a starting deadline, how long it may still wait.

The facts come from one query (``run_waits``) and are weighed in the order the claim
weighs them, so the first reason named is the one that holds the run now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched import wording
from pgsched.db import queries

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

# Why a run waits (status.waiting.reason, the RunWaiting Event's message).
NOT_DUE = "NotDue"
JITTERED = "JitteredStart"
MAX_CONCURRENT_RUNS = "MaxConcurrentRuns"
POOL_NOT_FOUND = "PoolNotFound"
POOL_FULL = "PoolFull"
LAUNCH_DEFERRED = "LaunchDeferred"
AWAITING_ADMISSION = "AwaitingAdmission"
DISPATCH = "Dispatch"
# The prefix engine/dispatch.py gives the error of a run whose launch was deferred.
DEFERRED_PREFIX = "launch deferred: "


@dataclass(frozen=True)
class Wait:
    """``message`` as it reads now (describe, the UI, the Event); ``lasting``, the same
    words less what changes while the run still waits (which runs hold a pool: other jobs'
    runs come and go; "in 40 s": a countdown), for the ScheduledJob's stored
    ``status.waiting``, which is rendered when this job changes, not when they do."""

    run_id: int
    reason: str  # one of the constants above
    message: str  # "pool etl (2 of 2 running: runs 17, 18); starting deadline in 40 s"
    lasting: str  # "pool etl (2 of 2 running); starting deadline at 2026-06-01T12:05:00Z"


def of_runs(conn: Connection, run_ids: Sequence[int], *, now: datetime) -> dict[int, Wait]:
    """What each of these runs waits for; runs that do not wait are left out."""
    if not run_ids:
        return {}
    rows = conn.execute(queries.get("run_waits"), {"ids": list(run_ids)}).fetchall()
    return {row["id"]: explain(row, now=now) for row in rows}


def of_run(conn: Connection, run_id: int, *, now: datetime) -> Wait | None:
    return of_runs(conn, [run_id], now=now).get(run_id)


def first_of(conn: Connection, definition_id: UUID, *, now: datetime) -> Wait | None:
    """What the oldest QUEUED run of a ScheduledJob waits for (its status says it)."""
    row = conn.execute(
        queries.get("first_waiting_run"), {"definition_id": definition_id}
    ).fetchone()
    return of_run(conn, row["id"], now=now) if row else None


def explain(row: dict[str, Any], *, now: datetime) -> Wait:
    """The wait of one ``run_waits`` row (pure: the database's facts and ``now``)."""
    reason, what, lasting = _holder(row, now=now)
    deadline = row["deadline_at"]
    if deadline is not None and row["status"] == "QUEUED":
        left = (deadline - now).total_seconds()
        what += (
            f"; starting deadline in {wording.seconds(left)}"
            if left > 0
            else f"; starting deadline passed {wording.seconds(-left)} ago (it will be skipped)"
        )
        lasting += f"; starting deadline at {wording.instant(deadline)}"
    return Wait(row["id"], reason, what, lasting)


def _holder(row: dict[str, Any], *, now: datetime) -> tuple[str, str, str]:
    """The reason, the message as it reads now, and its lasting words (see :class:`Wait`)."""
    if row["status"] == "RUNNING":  # awaiting admission: the claim is done
        queue = row["kueue_queue"]
        said = f"admission (Kueue queue {queue})" if queue else "admission (its Job is suspended)"
        return AWAITING_ADMISSION, said, said
    if row["scheduled_for"] > now:
        left = wording.seconds((row["scheduled_for"] - now).total_seconds())
        due = f"its time, {wording.instant(row['scheduled_for'])}"
        return NOT_DUE, f"{due} (in {left})", due
    not_before = row["not_before"]
    if not_before is not None and not_before > now:  # spec.jitterSeconds
        left = wording.seconds((not_before - now).total_seconds())
        start = f"its jittered start, {wording.instant(not_before)} (spec.jitterSeconds)"
        return JITTERED, f"{start}, in {left}", start
    holding: list[int] = row["holding"]
    cap = row["max_concurrent_runs"]
    if len(holding) >= cap:
        stopping = set(row["stopping"])
        held = ", ".join(
            f"{wording.runs([item])} {'stopping' if item in stopping else 'running'}"
            for item in holding
        )
        # The job's own runs: its status is rendered again whenever one of them changes.
        said = f"maxConcurrentRuns {cap} ({held})"
        return MAX_CONCURRENT_RUNS, said, said
    pool = row["pool"]
    if pool:
        limit = row["pool_limit"]
        if limit is None:
            said = f"pool {pool} (no ConcurrencyPool {pool} in namespace {row['namespace']})"
            return POOL_NOT_FOUND, said, said
        pool_holding: list[int] = row["pool_holding"]
        if len(pool_holding) >= limit:
            full = f"pool {pool} ({len(pool_holding)} of {limit} running"
            return POOL_FULL, f"{full}: {wording.runs(pool_holding)})", f"{full})"
    error = row["error"] or ""
    if error.startswith(DEFERRED_PREFIX):
        said = f"the API server (launch deferred: {error.removeprefix(DEFERRED_PREFIX)})"
        return LAUNCH_DEFERRED, said, said
    said = "the next dispatch (nothing holds it back)"
    return DISPATCH, said, said
