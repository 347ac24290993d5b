"""Definitions: the durable intent behind each ScheduledJob.

``upsert`` is idempotent and generation-aware, so every operator replica can call it for
every event it sees: an older generation arriving late never overwrites a newer one, and
re-applying the same generation changes nothing that matters.

``next_run_at`` is recomputed only when something that decides *when* changed (schedule
text, kind, zone, DST policy); editing the job template of a daily job must not move or
repeat today's run. After a schedule change the next occurrence is the first one after
both "now" and the last materialized occurrence, so a change never repeats a run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol
from uuid import UUID

from pgsched import schedule
from pgsched.db import clock, queries
from pgsched.engine import chain, runs
from pgsched.engine.models import Definition, Run
from pgsched.engine.retry import RetryPolicy
from pgsched.schedule import timeline, zones
from pgsched.schedule import window as windows

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

_TIMING_FIELDS = ("schedule_kind", "schedule", "time_zone", "dst_gap", "dst_repeat", "window")


@dataclass(frozen=True)
class DefinitionSpec:
    """What the engine stores for a definition: the engine's input, built and validated
    from a ScheduledJob's spec by ``pgsched.spec.parse``."""

    schedule_kind: schedule.ScheduleKind
    schedule: str
    time_zone: str = "UTC"
    dst_gap: zones.GapPolicy = "shift"
    dst_repeat: zones.RepeatPolicy = "first"
    suspend: bool = False
    max_concurrent_runs: int = 1
    concurrency_policy: Literal["Queue", "Skip", "Replace"] = "Queue"
    max_queued_runs: int | None = None
    starting_deadline_seconds: int | None = None
    catch_up: Literal["latest", "all", "none"] = "latest"
    catch_up_limit: int = 100
    active_deadline_seconds: int | None = None
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    heartbeat_interval_seconds: int = 10
    heartbeat_timeout_seconds: int = 60
    orphan_timeout_seconds: int = 300
    cancel_grace_seconds: int = 30
    failure_suspend_threshold: int | None = None
    after: tuple[chain.Upstream, ...] = ()
    after_mode: chain.Mode = "Any"
    window: windows.Window | None = None  # spec.activeFrom / activeUntil
    # The rest of the spec (jobTemplate, job, history limits), stored for the launcher.
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DefinitionKey:
    """Identity of a definition: the ScheduledJob's uid, name and generation."""

    id: UUID
    namespace: str
    name: str
    generation: int
    created_at: datetime

    @property
    def hash_seed(self) -> str:
        return f"{self.namespace}/{self.name}"


def upsert(
    conn: Connection,
    key: DefinitionKey,
    spec: DefinitionSpec,
    *,
    raw_spec: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> Definition:
    """Create or update a definition from a validated spec; returns the stored row.

    Raises :class:`chain.CycleError` (and stores nothing) if ``spec.after`` closes a cycle.
    """
    with conn.transaction():
        at = clock.now(conn, now)
        row = conn.execute(queries.get("definition_for_update"), {"id": key.id}).fetchone()
        existing = Definition.from_row(row) if row else None
        if existing is not None and existing.generation > key.generation:
            log.info(
                "ignoring generation %s of %s: generation %s is already stored",
                key.generation,
                key.hash_seed,
                existing.generation,
            )
            return existing
        next_run_at = _next_run_at(existing, key, spec, at)
        params = {
            "id": key.id,
            "namespace": key.namespace,
            "name": key.name,
            "generation": key.generation,
            "schedule_kind": spec.schedule_kind,
            "schedule": spec.schedule,
            "time_zone": spec.time_zone,
            "dst_gap": spec.dst_gap,
            "dst_repeat": spec.dst_repeat,
            "anchor": key.created_at,
            "catch_up": spec.catch_up,
            "catch_up_limit": spec.catch_up_limit,
            "starting_deadline_seconds": spec.starting_deadline_seconds,
            "max_concurrent_runs": spec.max_concurrent_runs,
            "max_queued_runs": spec.max_queued_runs,
            "concurrency_policy": spec.concurrency_policy,
            "active_deadline_seconds": spec.active_deadline_seconds,
            "retry_policy": json.dumps(spec.retry_policy.to_json()),
            "heartbeat_interval_seconds": spec.heartbeat_interval_seconds,
            "heartbeat_timeout_seconds": spec.heartbeat_timeout_seconds,
            "orphan_timeout_seconds": spec.orphan_timeout_seconds,
            "cancel_grace_seconds": spec.cancel_grace_seconds,
            "failure_suspend_threshold": spec.failure_suspend_threshold,
            "suspended": spec.suspend,
            "spec": json.dumps(raw_spec if raw_spec is not None else dict(spec.extra)),
            "next_run_at": next_run_at,
            "after_mode": spec.after_mode,
            "now": at,
        }
        stored = conn.execute(queries.get("upsert_definition"), params).fetchone()
        assert stored is not None
        chain.store(conn, key.id, namespace=key.namespace, name=key.name, after=spec.after)
        if existing is not None and (
            existing.starting_deadline_seconds != spec.starting_deadline_seconds
        ):
            # As a CronJob reads startingDeadlineSeconds at every sync: runs already queued
            # get the new deadline (or none); the reaper skips those past it.
            conn.execute(queries.get("reevaluate_queued_deadlines"), {"id": key.id})
        return Definition.from_row(stored)


def _next_run_at(
    existing: Definition | None, key: DefinitionKey, spec: DefinitionSpec, now: datetime
) -> datetime | None:
    if existing is not None and all(
        getattr(existing, name) == getattr(spec, name) for name in _TIMING_FIELDS
    ):
        return existing.next_run_at
    timing = build_schedule(spec, hash_seed=key.hash_seed, anchor=key.created_at)
    if spec.schedule_kind == "once":
        # A one-shot runs even if its time has passed (catchUp decides); it is never
        # materialized twice because the occurrence key is unique.
        first = timing.next_after(datetime(1970, 1, 1, tzinfo=UTC))
        return first.at if first else None
    after = now
    if existing is not None and existing.last_scheduled_for is not None:
        after = max(after, existing.last_scheduled_for)
    upcoming = timing.next_after(after)
    return upcoming.at if upcoming else None


def reject(
    conn: Connection, key: DefinitionKey, rejection: str, *, now: datetime | None = None
) -> Definition | None:
    """Record that generation ``key.generation`` was invalid. The stored (older, valid)
    definition stays in force; returns it, or None if no generation was ever valid."""
    with conn.transaction():
        row = conn.execute(
            queries.get("reject_generation"),
            {
                "id": key.id,
                "generation": key.generation,
                "rejection": rejection,
                "now": clock.now(conn, now),
            },
        ).fetchone()
    return Definition.from_row(row) if row else None


class Timing(Protocol):
    """What decides when a definition runs (``_TIMING_FIELDS``): a spec being applied
    (:class:`DefinitionSpec`) or a stored :class:`~pgsched.engine.models.Definition`."""

    @property
    def schedule_kind(self) -> schedule.ScheduleKind: ...
    @property
    def schedule(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def dst_gap(self) -> zones.GapPolicy: ...
    @property
    def dst_repeat(self) -> zones.RepeatPolicy: ...
    @property
    def window(self) -> windows.Window | None: ...


def build_schedule(timing: Timing, *, hash_seed: str, anchor: datetime) -> timeline.Stream:
    """The one place a definition's schedule is built: validation (``spec.parse``), the
    stored next run, materializing, status and the CLI all go through it."""
    built = schedule.build(
        timing.schedule_kind,
        timing.schedule,
        zone=timing.time_zone,
        dst=zones.DstPolicy(gap=timing.dst_gap, repeat=timing.dst_repeat),
        hash_seed=hash_seed,
        anchor=anchor,
    )
    return windows.bound(built, timing.window)


def schedule_of(definition: Definition) -> timeline.Stream:
    """The stored definition's schedule (hashed by its ``namespace/name``)."""
    return build_schedule(definition, hash_seed=definition.key, anchor=definition.anchor)


def get(conn: Connection, definition_id: UUID) -> Definition | None:
    row = conn.execute(queries.get("definition_by_id"), {"id": definition_id}).fetchone()
    return Definition.from_row(row) if row else None


def get_many(conn: Connection, definition_ids: list[UUID]) -> dict[UUID, Definition]:
    rows = conn.execute(queries.get("definitions_by_ids_unlocked"), {"ids": definition_ids})
    return {row["id"]: Definition.from_row(row) for row in rows}


def find(conn: Connection, namespace: str, name: str) -> Definition | None:
    row = conn.execute(
        queries.get("definition_by_name"), {"namespace": namespace, "name": name}
    ).fetchone()
    return Definition.from_row(row) if row else None


def run_at_accepted(conn: Connection, definition_id: UUID, run_at: str) -> bool:
    """Whether this very runAt is already stored for the definition: then it is not
    checked against "now" again (it may have passed since; it was fine when applied)."""
    stored = get(conn, definition_id)
    return stored is not None and stored.schedule_kind == "once" and stored.schedule == run_at


def find_with_deleted(conn: Connection, namespace: str, name: str) -> list[Definition]:
    """Every definition that had this name: the live one first, then deleted ones, newest
    first. A re-created ScheduledJob is a new definition (a new uid); the old one's runs
    keep their ids and stay under it."""
    rows = conn.execute(
        queries.get("definitions_by_name_with_deleted"), {"namespace": namespace, "name": name}
    ).fetchall()
    return [Definition.from_row(row) for row in rows]


def delete(
    conn: Connection,
    definition_id: UUID,
    *,
    by: str = runs.BY_DELETION,
    why: str = "ScheduledJob deleted",
    now: datetime | None = None,
) -> list[Run]:
    """Mark deleted, cancel queued runs, ask running ones to stop (``by`` and ``why``: who
    cancelled them, and why, as their cancellations record it).

    Returns the runs that were asked to stop cooperatively (still RUNNING)."""
    with conn.transaction():
        at = clock.now(conn, now)
        conn.execute(queries.get("mark_definition_deleted"), {"id": definition_id, "now": at})
        outcome = runs.cancel_definition(conn, definition_id, by=by, why=why, now=at)
    return outcome.asked_to_stop


def mark_published(conn: Connection, definition_id: UUID, generation: int) -> None:
    """Record that the status and Event of ``generation`` are written (not a change of
    the definition: its version stays)."""
    conn.execute(queries.get("mark_published"), {"id": definition_id, "generation": generation})


def set_suspended(
    conn: Connection, definition_id: UUID, suspended: bool, *, now: datetime | None = None
) -> Definition | None:
    """Suspend or resume. Resuming also clears an automatic suspension and its streak."""
    with conn.transaction():
        at = clock.now(conn, now)
        params = {"id": definition_id, "suspended": suspended, "now": at}
        row = conn.execute(queries.get("set_definition_suspended"), params).fetchone()
        if row and not suspended:
            return clear_auto_suspension(conn, definition_id, now=at)
    return Definition.from_row(row) if row else None


def set_suspend_reason(conn: Connection, definition_id: UUID, reason: str | None) -> None:
    """Store why spec.suspend is true (None: no reason given)."""
    conn.execute(queries.get("set_suspend_reason"), {"id": definition_id, "reason": reason})


def clear_auto_suspension(
    conn: Connection, definition_id: UUID, *, now: datetime | None = None
) -> Definition | None:
    """Clear an automatic suspension (``failureSuspendThreshold``) and its failure streak;
    ``spec.suspend`` (the ``suspended`` column) is left as it is."""
    params = {"id": definition_id, "now": clock.now(conn, now)}
    row = conn.execute(queries.get("clear_auto_suspend"), params).fetchone()
    return Definition.from_row(row) if row else None
