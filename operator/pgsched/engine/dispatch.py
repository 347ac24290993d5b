"""Dispatch: claim due runs under per-definition caps, then launch them.

A claim is one transaction run inside the server by ``pgsched.claim_for_dispatch``
(``sql/functions/claim_for_dispatch.sql``): one round trip, with the definitions' and
pools' locks held for milliseconds of server time, never across the network. It skips rows
another claimer holds (``SKIP LOCKED``), counts live RUNNING runs only after taking its
sorted locks, claims up to each definition's cap and pool's limit, and takes runs due
on time before the backlog. ``concurrencyPolicy`` (``Skip``, ``Replace``) refines what
happens to a run at its cap.

Launching happens after the commit, outside any lock, with each run's definition kept
between ticks (:class:`Owners`). A failed launch ends the run ``FAILED/LaunchFailed`` for
settle's retry policy; a deferred one (``LaunchDeferred``, the API server away) puts it
back to QUEUED with its attempt unspent. Runs an earlier tick claimed and never launched
(its replica stopped in between; the reaper finds them) are launched again first, under
their lease (``relaunch``).

Why it is safe: docs/architecture.md, "The mechanism"; the steps: "The claim, step by step".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import rows

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import definitions, lease, parameters, waits
from pgsched.engine.launcher import (
    LAUNCH_FAILED,
    Adopted,
    LaunchDeferred,
    Launcher,
    LaunchError,
)
from pgsched.engine.models import Definition, Run

log = logging.getLogger(__name__)

DEFAULT_OVERSHOOT = 4
# How many definitions Owners keeps (about 2 kB each): more than a busy tick launches.
OWNERS_KEPT = 10_000


@dataclass
class DispatchResult:
    claimed: list[Run] = field(default_factory=list)
    # Each claimed run's definition's version, as the claim read it after its lock.
    versions: dict[UUID, int] = field(default_factory=dict)
    launched: int = 0
    launch_failed: list[int] = field(default_factory=list)
    # Launches deferred (the API server away): back to QUEUED, attempt unspent.
    deferred: list[int] = field(default_factory=list)
    at_cap: set[UUID] = field(default_factory=set)
    skipped: list[int] = field(default_factory=list)
    replace_requested: list[int] = field(default_factory=list)
    # Claimed by an earlier tick that never launched them, launched again (not in claimed).
    relaunched: list[int] = field(default_factory=list)

    def add(self, other: DispatchResult) -> None:
        """Another claim of the same tick, launched after this one's runs."""
        self.claimed += other.claimed
        self.launched += other.launched
        self.launch_failed += other.launch_failed
        self.deferred += other.deferred
        self.at_cap |= other.at_cap
        self.skipped += other.skipped
        self.replace_requested += other.replace_requested
        self.versions.update(other.versions)


class Owners:
    """The definitions of claimed runs, kept between ticks by id and version.

    ``for_runs`` returns a definition for every claimed run whose definition exists: the
    kept one if its version is at least the one the claim read, otherwise the stored row,
    read again in one query for all that moved (and kept). Versions only grow, and the
    database bumps them on every change a launch can see, so an edited template, cap or
    deadline is used by the next claim after the edit. ``next_run_at`` and
    ``last_scheduled_for`` of a kept definition may be older than the row's: the launch
    does not read them.

    Kept per connection: a new session (after a failure, a failover, another database)
    starts empty, so a version is never compared across two servers' histories.
    """

    def __init__(self, kept: int = OWNERS_KEPT) -> None:
        self._kept = kept
        self._session: tuple[int, int] | None = None
        self._definitions: dict[UUID, Definition] = {}

    def for_runs(self, conn: Connection, result: DispatchResult) -> dict[UUID, Definition]:
        session = (id(conn), conn.info.backend_pid)
        if session != self._session:
            self._session, self._definitions = session, {}
        kept = self._definitions
        owners: dict[UUID, Definition] = {}
        stale: list[UUID] = []
        for definition_id in {run.definition_id for run in result.claimed}:
            known = kept.get(definition_id)
            if known is not None and known.version >= result.versions.get(definition_id, 0):
                owners[definition_id] = known
            else:
                stale.append(definition_id)
        if stale:
            fresh = definitions.get_many(conn, stale)
            owners.update(fresh)
            kept.update(fresh)
            while len(kept) > self._kept:  # the oldest kept first (dicts keep order)
                del kept[next(iter(kept))]
        return owners


def run_once(
    conn: Connection,
    launcher: Launcher,
    *,
    batch_size: int = 50,
    overshoot: int = DEFAULT_OVERSHOOT,
    definition_ids: list[UUID] | None = None,
    now: datetime | None = None,
    try_locks: bool = False,
    owners: Owners | None = None,
    on_time_seconds: float | None = None,
    on_time_since: datetime | None = None,
    relaunch: Sequence[Run] = (),
) -> DispatchResult:
    """Launch ``relaunch`` again, then claim and launch up to ``batch_size`` due runs.

    ``definition_ids`` restricts the claim (run-now dispatches its own definition at once).
    ``try_locks`` tries the definitions' locks before waiting (step 2 above). ``owners``
    keeps the launched definitions for the next call (the tick passes its own); without
    it they are read for this call only. ``on_time_seconds`` claims first for definitions
    with a run due that recently, or since ``on_time_since`` if given (the tick's "on time
    first", above). ``relaunch``: RUNNING runs an earlier claim never launched
    (``reap.ReapResult.unlaunched``), launched under the lease they hold.
    """

    def claim_some(limit: int, only: list[UUID] | None) -> DispatchResult:
        return claim(
            conn,
            batch_size=limit,
            overshoot=overshoot,
            definition_ids=only,
            now=now,
            try_locks=try_locks,
        )

    result = DispatchResult()
    if on_time_seconds is not None and definition_ids is None:
        punctual = on_time_definitions(
            conn, since=on_time_since, window=on_time_seconds, limit=batch_size, now=now
        )
        if punctual:
            result = claim_some(batch_size, punctual)
            result.claimed.sort(key=lambda run: run.scheduled_for, reverse=True)  # stable
    if len(result.claimed) < batch_size:
        result.add(claim_some(batch_size - len(result.claimed), definition_ids))
    if result.claimed:
        launch(conn, launcher, result, now=now, owners=owners)
    if relaunch:
        _relaunch(conn, launcher, relaunch, result, now=now, owners=owners)
    return result


def _relaunch(
    conn: Connection,
    launcher: Launcher,
    unlaunched: Sequence[Run],
    result: DispatchResult,
    *,
    now: datetime | None,
    owners: Owners | None,
) -> None:
    """Launch runs an earlier claim never launched, under the lease they hold: a launch is
    idempotent per run and lease, so if their claimant was only frozen and launches them
    too, the run still gets one workload. Counted into ``result`` but not its ``claimed``."""
    for run in unlaunched:
        log.warning(
            "run %s: claimed at %s and never launched (the replica that claimed it stopped"
            " before recording the launch); launching it now",
            run.id,
            run.started_at.isoformat() if run.started_at else "?",
        )
    again = DispatchResult(claimed=list(unlaunched))
    launch(conn, launcher, again, now=now, owners=owners)
    result.relaunched += [run.id for run in again.claimed]
    result.launched += again.launched
    result.launch_failed += again.launch_failed
    result.deferred += again.deferred


def on_time_definitions(
    conn: Connection,
    *,
    since: datetime | None = None,
    window: float,
    limit: int,
    now: datetime | None = None,
) -> list[UUID]:
    """Definitions (at most ``limit``, the newest due first) with a queued run due after
    ``since``, or without it in the last ``window`` seconds."""
    rows = conn.execute(
        queries.get("on_time_definitions"),
        {"since": since, "window": window, "limit": limit, "now": now},
    )
    return [row["definition_id"] for row in rows]


def claim(
    conn: Connection,
    *,
    batch_size: int = 50,
    overshoot: int = DEFAULT_OVERSHOOT,
    definition_ids: list[UUID] | None = None,
    now: datetime | None = None,
    try_locks: bool = False,
) -> DispatchResult:
    """The claim transaction alone (steps 1-4): one call of ``pgsched.claim_for_dispatch``.

    The connection is autocommit, so the call is its own transaction and its commit
    releases the definitions' locks as soon as the function returns.
    """
    cursor = conn.cursor(row_factory=rows.tuple_row).execute(
        queries.get("claim_for_dispatch"),
        {
            "batch_size": batch_size,
            "overshoot": overshoot,
            "now": now,
            "definition_ids": definition_ids,
            "try_locks": try_locks,
        },
        binary=True,
    )
    # A batch is many rows: in binary, the server does not format their timestamps and
    # uuids as text, nor the client parse them; as tuples, read by position (Run.reader).
    columns = [column.name for column in cursor.description or ()]
    read_run = Run.reader(columns)
    outcome_at, run_at, definition_at, claimed_at, version_at = map(
        columns.index,
        ("outcome", "subject_run", "subject_definition", "definition_id", "definition_version"),
    )
    result = DispatchResult()
    for row in cursor.fetchall():
        outcome = row[outcome_at]
        if outcome == "claimed":
            result.claimed.append(read_run(row))
            result.versions[row[claimed_at]] = row[version_at]
        elif outcome == "skipped":
            result.skipped.append(row[run_at])
        elif outcome == "replace":
            result.replace_requested.append(row[run_at])
        elif outcome == "at_cap":
            result.at_cap.add(row[definition_at])
        else:
            raise RuntimeError(f"pgsched.claim_for_dispatch returned unknown outcome {outcome!r}")
    # Launched in this order: oldest due first (a retry's row is newer than its due time).
    result.claimed.sort(key=lambda run: (run.scheduled_for, run.id))
    result.skipped.sort()
    result.replace_requested.sort()
    return result


def _launch_all(
    launcher: Launcher, claimed: list[Run], owners: dict[UUID, Definition]
) -> list[str | Adopted | Exception | None]:
    """Each run's handle, or the exception its launch raised, in the order of ``claimed``."""

    def one(run: Run) -> str | Adopted | Exception | None:
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


def _defer(
    conn: Connection,
    run: Run,
    deferred: LaunchDeferred,
    definition: Definition | None,
    *,
    now: datetime | None,
) -> None:
    """Undo the claim of a run whose launch was deferred: QUEUED again, attempt unspent
    (a run whose cancellation was requested meanwhile ends CANCELLED instead)."""
    assert run.lease_token is not None
    log_run = logs.for_run(log, run, definition)
    why = f"{waits.DEFERRED_PREFIX}{deferred}"
    params = {"run_id": run.id, "lease_token": run.lease_token, "error": why}
    if conn.execute(queries.get("requeue_deferred_launch"), params).fetchone():
        log_run.warning("run %s: %s; queued again", run.id, why)
        return
    lease.finish(
        conn,
        lease.Lease(run.id, run.lease_token),
        "CANCELLED",
        reason="Cancelled",
        error=f"cancelled before it could be launched ({why})",
        now=now,
        logger=log_run,
    )


def launch(
    conn: Connection,
    launcher: Launcher,
    result: DispatchResult,
    *,
    now: datetime | None = None,
    owners: Owners | None = None,
) -> None:
    """Launch claimed runs; a failure ends that run FAILED/LaunchFailed, or the reason the
    ``LaunchError`` names (fenced).

    A launcher with a ``parallelism`` attribute above 1 gets that many launches at once
    (creating a Job is a round trip to the API server; a stampede of runs due at the same
    second should not queue behind each other's). Everything that touches the database
    happens afterwards, on this thread.
    """
    definitions_of = (owners or Owners()).for_runs(conn, result)
    result.claimed[:] = parameters.given_to(conn, result.claimed, definitions_of)
    outcomes = _launch_all(launcher, result.claimed, definitions_of)
    recorded: dict[str, list[Any]] = {"ids": [], "lease_tokens": [], "handles": []}
    for run, outcome in zip(result.claimed, outcomes, strict=True):
        assert run.lease_token is not None
        if isinstance(outcome, LaunchDeferred):
            _defer(conn, run, outcome, definitions_of.get(run.definition_id), now=now)
            result.deferred.append(run.id)
            continue
        if isinstance(outcome, Exception):
            definition = definitions_of.get(run.definition_id)
            log_run = logs.for_run(log, run, definition)
            log_run.warning("run %s: launch failed: %s", run.id, outcome)
            lease.finish(
                conn,
                lease.Lease(run.id, run.lease_token),
                "FAILED",
                reason=outcome.reason if isinstance(outcome, LaunchError) else LAUNCH_FAILED,
                error=f"{type(outcome).__name__}: {outcome}",
                now=now,
                logger=log_run,
            )
            result.launch_failed.append(run.id)
            continue
        result.launched += 1
        token = run.lease_token
        if isinstance(outcome, Adopted):  # the run now holds the adopted Job's lease
            token = outcome.lease_token
            outcome = outcome.handle
        if outcome:
            recorded["ids"].append(run.id)
            recorded["lease_tokens"].append(token)
            recorded["handles"].append(outcome)
    if recorded["ids"]:
        # One statement for the batch. A crash before it leaves the Job names unrecorded,
        # which is harmless: they are deterministic, and heartbeats do not need them.
        conn.execute(queries.get("record_launches"), recorded)
