"""Dispatch: claim due runs under per-definition caps, then launch them.

One claim transaction, exactly as the seed describes it:

1. select about ``overshoot x batch`` due QUEUED candidates ``FOR UPDATE SKIP LOCKED`` —
   rows another claimer holds are skipped, not waited on, so concurrent dispatchers get
   disjoint slices; the overshoot keeps one definition with hundreds of queued runs from
   crowding out the others before caps are applied;
2. take ``pg_advisory_xact_lock(hashtextextended('dispatch:' || definition_id, 0))`` for
   the definitions of the first ``batch`` candidates, in one sorted order (inside
   ``pgsched.lock_and_count_for_dispatch``), so dispatchers claiming runs of the same
   definition serialize and never deadlock; if caps leave the batch short, *try* the locks
   of the further candidates' definitions (never waiting, so order cannot matter) and use
   those granted. The ``try`` lock mode (``PGSCHED_DISPATCH_LOCKS``) tries round one too,
   for deployments where several dispatchers claim at once — see ``_lock_and_count``;
3. *after* the locks, read the live RUNNING count per definition (READ COMMITTED: a fresh
   snapshot that includes every claim committed before our lock was granted);
4. claim up to ``cap - running`` per definition and ``batch`` in all; definitions at their
   cap are skipped, not failed: their rows stay QUEUED for a later tick (backpressure).

Locking, counting and claiming are a handful of round trips per batch, not one per
definition or run (``bench/README.md`` has the measurements that shaped this).

The commit releases every lock. Launching happens afterwards, outside the transaction: a
launch failure ends the run ``FAILED/LaunchFailed`` (fenced by its lease) and ``settle``
applies the retry policy to it like to any other failure.

``concurrencyPolicy`` refines step 4 for runs started by the schedule: ``Skip`` records a
due run of a definition at its cap as ``SKIPPED/ConcurrencyPolicy``; ``Replace`` asks the
oldest running runs to stop (cooperatively) and leaves the new run queued until they have.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import definitions, lease
from pgsched.engine.launcher import Launcher, LaunchError
from pgsched.engine.models import Definition, Run

log = logging.getLogger(__name__)

DEFAULT_OVERSHOOT = 4


@dataclass
class DispatchResult:
    claimed: list[Run] = field(default_factory=list)
    launched: int = 0
    launch_failed: list[int] = field(default_factory=list)
    at_cap: set[UUID] = field(default_factory=set)
    skipped: list[int] = field(default_factory=list)
    replace_requested: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Limits:
    max_runs: int
    policy: str
    deleted: bool
    running: int
    stopping: int  # running, but already asked to stop


def run_once(
    conn: Connection,
    launcher: Launcher,
    *,
    batch_size: int = 50,
    overshoot: int = DEFAULT_OVERSHOOT,
    definition_ids: list[UUID] | None = None,
    now: datetime | None = None,
    try_locks: bool = False,
    lock_definitions: bool = True,
) -> DispatchResult:
    """Claim and launch up to ``batch_size`` due runs.

    ``definition_ids`` restricts the claim (run-now dispatches its own definition at once).
    ``try_locks`` tries the definitions' locks before waiting (see ``_lock_and_count``).
    ``lock_definitions=False`` exists only so the chaos self-test can prove the invariant
    checker catches the over-cap claims that skipping the advisory locks allows.
    """
    result = claim(
        conn,
        batch_size=batch_size,
        overshoot=overshoot,
        definition_ids=definition_ids,
        now=now,
        try_locks=try_locks,
        lock_definitions=lock_definitions,
    )
    if result.claimed:
        launch(conn, launcher, result, now=now)
    return result


def claim(
    conn: Connection,
    *,
    batch_size: int = 50,
    overshoot: int = DEFAULT_OVERSHOOT,
    definition_ids: list[UUID] | None = None,
    now: datetime | None = None,
    try_locks: bool = False,
    lock_definitions: bool = True,
) -> DispatchResult:
    """The claim transaction alone (steps 1-4)."""
    result = DispatchResult()
    with conn.transaction():
        candidates = conn.execute(
            queries.get("claim_candidates"),
            {"now": now, "limit": batch_size * overshoot, "definition_ids": definition_ids},
        ).fetchall()
        if not candidates:
            return result
        limits = _lock_and_count(
            conn, candidates, batch_size, lock_definitions=lock_definitions, try_locks=try_locks
        )
        chosen, skipped, replace = _choose(candidates, limits, batch_size, result)
        if skipped:
            conn.execute(
                queries.get("skip_runs"),
                {
                    "ids": skipped,
                    "reason": "ConcurrencyPolicy",
                    "error": "the definition was at maxConcurrentRuns and concurrencyPolicy is Skip",
                    "now": now,
                },
            )
            result.skipped = skipped
        for definition_id, count in replace.items():
            rows = conn.execute(
                queries.get("cancel_oldest_running"),
                {"definition_id": definition_id, "count": count, "now": now},
            ).fetchall()
            result.replace_requested += [row["id"] for row in rows]
        if chosen:
            rows = conn.execute(queries.get("claim_runs"), {"ids": chosen, "now": now}).fetchall()
            result.claimed = sorted((Run.from_row(row) for row in rows), key=lambda run: run.id)
    return result


def _launch_all(
    launcher: Launcher, claimed: list[Run], owners: dict[UUID, Definition]
) -> list[str | Exception | None]:
    """Each run's handle, or the exception its launch raised, in the order of ``claimed``."""

    def one(run: Run) -> str | Exception | None:
        definition = owners.get(run.definition_id)
        try:
            if definition is None:
                raise LaunchError(f"definition {run.definition_id} of run {run.id} is gone")
            return launcher.launch(run, definition)
        except Exception as error:
            return error

    parallelism = min(int(getattr(launcher, "parallelism", 1)), len(claimed))
    if parallelism <= 1:
        return [one(run) for run in claimed]
    with ThreadPoolExecutor(parallelism, thread_name_prefix="pgsched-launch") as pool:
        return list(pool.map(one, claimed))


def _lock_and_count(
    conn: Connection,
    candidates: list[dict[str, Any]],
    batch_size: int,
    *,
    lock_definitions: bool,
    try_locks: bool,
) -> dict[UUID, _Limits]:
    """Lock the definitions this claim may take runs of, and read their live counts.

    The locks are transaction advisory locks on ``hashtextextended('dispatch:' || id, 0)``.
    Round one covers the definitions of the first ``batch_size`` candidates — enough to
    fill the batch when caps allow:

    - by default (the seed's rule) with ``pg_advisory_xact_lock``, waiting, in one sorted
      key order, so two dispatchers claiming runs of the same definition serialize and
      never deadlock;
    - with ``try_locks`` with ``pg_try_advisory_xact_lock``, keeping those granted: a
      definition another dispatcher is claiming right now is skipped this time, as SKIP
      LOCKED skips its rows, so concurrent dispatchers claim side by side instead of taking
      turns. Only if *no* lock was granted does the claim wait as above — it holds no lock
      yet, so waiting cannot deadlock, and it progresses instead of spinning.

    If caps leave the batch short, round two *tries* the locks of the further candidates'
    definitions (never waiting, so order cannot matter): the overshoot lets other
    definitions fill the batch when one crowds the front. Counts are always read after the
    locks were granted, in the same call (I2).
    """
    if lock_definitions:
        first_round = "try_lock_and_count" if try_locks else "lock_and_count"
        second_round = "try_lock_and_count"
    else:  # test-only: the chaos self-test's planted bug, the same claim minus its locks
        first_round = second_round = "count_without_locks"
    first = _definitions_of(candidates[:batch_size])
    limits = _limits(conn, first_round, first)
    if lock_definitions and try_locks and not limits:
        limits = _limits(conn, "lock_and_count", first)
    rest = [definition for definition in _definitions_of(candidates) if definition not in limits]
    if rest and _claimable(candidates, limits) < batch_size:
        limits |= _limits(conn, second_round, rest)
    return limits


def _definitions_of(candidates: list[dict[str, Any]]) -> list[UUID]:
    """Distinct definition ids in queue order (the SQL functions sort what they wait for)."""
    return list(dict.fromkeys(row["definition_id"] for row in candidates))


def _limits(conn: Connection, query: str, definition_ids: list[UUID]) -> dict[UUID, _Limits]:
    rows = conn.execute(queries.get(query), {"definition_ids": definition_ids})
    return {
        row["id"]: _Limits(
            row["max_concurrent_runs"],
            row["concurrency_policy"],
            row["deleted"],
            row["running"],
            row["stopping"],
        )
        for row in rows
    }


def _claimable(candidates: list[dict[str, Any]], limits: dict[UUID, _Limits]) -> int:
    """How many candidates the caps in ``limits`` would let this claim take."""
    room = {
        key: max(0, item.max_runs - item.running)
        for key, item in limits.items()
        if not item.deleted
    }
    taken = 0
    for row in candidates:
        if room.get(row["definition_id"], 0) > 0:
            room[row["definition_id"]] -= 1
            taken += 1
    return taken


def _choose(
    candidates: list[dict[str, object]],
    limits: dict[UUID, _Limits],
    batch_size: int,
    result: DispatchResult,
) -> tuple[list[int], list[int], Counter[UUID]]:
    """Walk candidates in scheduled order; take what the caps allow."""
    room = {
        definition_id: max(0, item.max_runs - item.running)
        for definition_id, item in limits.items()
    }
    chosen: list[int] = []
    skipped: list[int] = []
    waiting: Counter[UUID] = Counter()
    for row in candidates:
        definition_id = row["definition_id"]
        run_id = row["id"]
        assert isinstance(definition_id, UUID) and isinstance(run_id, int)
        item = limits.get(definition_id)
        if item is None:
            continue  # another dispatcher holds its lock: stays QUEUED for a later claim
        if item.deleted:
            continue  # its runs are being cancelled by the deletion
        if room[definition_id] > 0 and len(chosen) < batch_size:
            room[definition_id] -= 1
            chosen.append(run_id)
            continue
        if room[definition_id] > 0:
            continue  # the batch is full; not a cap problem
        result.at_cap.add(definition_id)
        if row["trigger"] == "schedule" and item.policy == "Skip":
            skipped.append(run_id)
        elif row["trigger"] == "schedule" and item.policy == "Replace":
            waiting[definition_id] += 1
    # Runs already asked to stop free their slots soon: ask only for the difference, or a
    # cap of 2 would see its second run cancelled while the first is still stopping.
    replace: Counter[UUID] = Counter()
    for definition_id, count in waiting.items():
        item = limits[definition_id]
        extra = min(count, item.running) - item.stopping
        if extra > 0:
            replace[definition_id] = extra
    return chosen, skipped, replace


def launch(
    conn: Connection, launcher: Launcher, result: DispatchResult, *, now: datetime | None = None
) -> None:
    """Launch claimed runs; a failure ends that run FAILED/LaunchFailed (fenced).

    A launcher with a ``parallelism`` attribute above 1 gets that many launches at once
    (creating a Job is a round trip to the API server; a stampede of runs due at the same
    second should not queue behind each other's). Everything that touches the database
    happens afterwards, on this thread.
    """
    owners = definitions.get_many(conn, list({run.definition_id for run in result.claimed}))
    outcomes = _launch_all(launcher, result.claimed, owners)
    recorded: dict[str, list[Any]] = {"ids": [], "lease_tokens": [], "handles": []}
    for run, outcome in zip(result.claimed, outcomes, strict=True):
        assert run.lease_token is not None
        if isinstance(outcome, Exception):
            definition = owners.get(run.definition_id)
            log_run = logs.for_run(log, run, definition)
            log_run.warning("run %s: launch failed: %s", run.id, outcome)
            lease.finish(
                conn,
                lease.Lease(run.id, run.lease_token),
                "FAILED",
                reason="LaunchFailed",
                error=f"{type(outcome).__name__}: {outcome}",
                now=now,
                logger=log_run,
            )
            result.launch_failed.append(run.id)
            continue
        result.launched += 1
        if outcome:
            recorded["ids"].append(run.id)
            recorded["lease_tokens"].append(run.lease_token)
            recorded["handles"].append(outcome)
    if recorded["ids"]:
        # One statement for the batch. A crash before it leaves the Job names unrecorded,
        # which is harmless: they are deterministic, and heartbeats do not need them.
        conn.execute(queries.get("record_launches"), recorded)
