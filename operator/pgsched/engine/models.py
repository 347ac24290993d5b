"""Rows as frozen objects: what the store hands to the rest of the engine."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, Self, TypeVar
from uuid import UUID

from pgsched.schedule import window as windows

RunStatus = Literal["QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "SKIPPED"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"COMPLETED", "FAILED", "CANCELLED", "SKIPPED"})

_R = TypeVar("_R")


class _Row:
    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """Build from a dict row, ignoring columns the dataclass does not declare (so a
        later migration that adds a column does not break older readers)."""
        names = _field_names(cls)  # type: ignore[arg-type]
        try:
            values = {name: row[name] for name in names}
        except KeyError:  # a column left out: __init__ applies defaults (or says what lacks)
            return cls(**{name: row[name] for name in names if name in row})
        return _filled(cls, values)

    @classmethod
    def reader(cls, columns: Sequence[str]) -> Callable[[Sequence[Any]], Self]:
        """Build from tuple rows whose columns are named ``columns`` (a cursor's
        description), like :meth:`from_row` from the same rows as dicts. For readers of
        many rows: psycopg makes a tuple row in half the time of a dict row, and the
        fields' positions are looked up once, not per row."""
        names = _field_names(cls)  # type: ignore[arg-type]
        if not set(names) <= set(columns):
            return lambda row: cls.from_row(dict(zip(columns, row, strict=True)))
        pick = operator.itemgetter(*(columns.index(name) for name in names))
        return lambda row: _filled(cls, zip(names, pick(row), strict=True))


def _filled(cls: type[_R], values: dict[str, Any] | Iterable[tuple[str, Any]]) -> _R:
    """A frozen instance with every field set. Its generated __init__ would only assign
    the same values one object.__setattr__ at a time (these classes have no
    __post_init__), four times slower for the dispatcher's thousands of rows a second."""
    built = object.__new__(cls)
    built.__dict__.update(values)
    return built


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() walks the class on every call; the dispatcher builds thousands
    # of rows a second.
    assert not hasattr(cls, "__post_init__"), f"{cls.__name__}.from_row skips __post_init__"
    return tuple(item.name for item in fields(cls))


@dataclass(frozen=True)
class Definition(_Row):
    id: UUID
    namespace: str
    name: str
    generation: int
    schedule_kind: Literal["cron", "rrule", "once", "none", "union"]
    schedule: str
    time_zone: str
    dst_gap: Literal["shift", "skip"]
    dst_repeat: Literal["first", "last", "both"]
    anchor: datetime
    catch_up: Literal["latest", "all", "none"]
    catch_up_limit: int
    starting_deadline_seconds: int | None
    max_concurrent_runs: int
    max_queued_runs: int | None
    concurrency_policy: Literal["Queue", "Skip", "Replace"]
    active_deadline_seconds: int | None
    retry_policy: dict[str, Any]
    heartbeat_interval_seconds: int
    heartbeat_timeout_seconds: int
    orphan_timeout_seconds: int
    cancel_grace_seconds: int
    failure_suspend_threshold: int | None
    consecutive_failures: int
    suspended: bool
    auto_suspended_at: datetime | None
    auto_suspend_reason: str | None
    spec: dict[str, Any]
    next_run_at: datetime | None
    last_scheduled_for: datetime | None
    deleted_at: datetime | None
    created_at: datetime
    updated_at: datetime
    rejected_generation: int | None = None
    rejection: str | None = None
    after_mode: Literal["Any", "All"] = "Any"
    # Bumped by the database on every change but materialize's bookkeeping (next_run_at,
    # last_scheduled_for): trigger job_definitions_version. What the dispatcher's Owners cache
    # is keyed by.
    version: int = 1
    # The ScheduledJob generation whose status and Event the operator wrote
    # (pgsched.published_generations; read with the definition by ``definitions.get``, else
    # None).
    published_generation: int | None = None
    # Why spec.suspend is true: the pgsched.dev/suspend-reason annotation (suspend_reasons).
    suspend_reason: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def suspended_why(self) -> str:
        """Why it is suspended, for a person: the automatic suspension's reason, or
        ``spec.suspend is true`` with the reason its writer gave."""
        if self.auto_suspend_reason:
            return self.auto_suspend_reason
        given = f": {self.suspend_reason}" if self.suspend_reason else ""
        return f"spec.suspend is true{given}"

    @property
    def is_suspended(self) -> bool:
        return self.suspended or self.auto_suspended_at is not None

    @property
    def window(self) -> windows.Window | None:
        """spec.activeFrom / activeUntil (``pgsched.schedule.window``), None without."""
        return windows.of(self.spec)


@dataclass(frozen=True)
class Run(_Row):
    id: int
    definition_id: UUID
    status: RunStatus
    trigger: Literal["schedule", "manual", "retry", "backfill", "upstream"]
    scheduled_for: datetime
    deadline_at: datetime | None
    attempt: int
    retry_of: int | None
    request_token: str | None
    lease_token: UUID | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    cancel_requested_at: datetime | None
    reason: str | None
    error: str | None
    exit_code: int | None
    retry_hint: str | None
    k8s_job_name: str | None
    settled_at: datetime | None
    created_at: datetime
    cancelled_by: str | None  # who asked it to stop: runs.BY_*
    retry_decision: str | None  # what settling decided, and why
    upstream_run_id: int | None = None  # the upstream run whose final outcome queued it
    workload_ended_at: datetime | None = None  # the sidecar saw the workload end
    not_before: datetime | None = None  # the jittered start, if later (run_delays, engine.jitter)
    parameters: dict[str, str] | None = None  # values it was queued with (run_parameters)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class Start(_Row):
    """What is known of a run's start (``pgsched.run_starts``, ``engine.starts``): its workload's
    start, or why it has not started yet."""

    run_id: int
    workload_started_at: datetime | None
    waiting_reason: str | None
    waiting_message: str | None
    awaiting_admission: bool
    admitted_at: datetime | None
    bound_at: datetime | None
    observed_at: datetime

    @property
    def launching(self) -> bool:
        return self.workload_started_at is None
