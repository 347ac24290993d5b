"""Backfill: one QUEUED run (trigger ``backfill``) per occurrence of a past range.

Two callers ask for it: the operator, for a ``pgsched.dev/backfill`` annotation (what
``pgsched backfill`` writes by default, so Kubernetes RBAC applies), and ``pgsched
backfill --database`` (an administrator's path). Both check the range and list its
occurrences here, with the schedule the materializer uses, and queue them here.

Occurrences are those of ``definitions.schedule_of(definition)`` between ``start`` and
``end``, both inclusive, oldest first; an occurrence a DST gap skips under ``gap: skip``
never runs. The occurrence key (definition, scheduled_for, trigger) is unique, so running
the same backfill twice, or resuming an interrupted one, queues nothing twice; a backfill
run is distinct from the scheduled run of the same instant (re-running the past is the
point). Backfill runs have no starting deadline and are never skipped by
``concurrencyPolicy: Skip``; they are dispatched like any run, so ``maxConcurrentRuns``
always holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine.models import Definition
from pgsched.schedule import timeline

MAX_OCCURRENCES = 100_000
INSERT_BATCH = 1_000


class RangeError(ValueError):
    """The range cannot be backfilled; the message says why and how to fix it."""


def occurrences(
    schedule: timeline.Stream,
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    first: str,
    last: str,
    subject: str,
) -> list[datetime]:
    """The occurrences to queue, oldest first: ``schedule`` is the ScheduledJob's
    (``definitions.schedule_of``), ``subject`` its ``namespace/name``; ``first`` and
    ``last`` are how the caller's user wrote the bounds (``--from 2026-06-01``)."""
    if start > end:
        raise RangeError(f"{first} is after {last}: nothing to backfill")
    if end > now:
        raise RangeError(
            f"{last} ({_utc(end)}) is in the future (now is {_utc(now)}): backfill re-runs"
            " past occurrences only, the schedule runs future ones"
        )
    found: list[datetime] = []
    for occurrence in schedule.occurrences_after(start - timedelta(microseconds=1)):
        if occurrence.at > end:
            break
        if occurrence.skipped:  # a DST gap under gap: skip never runs
            continue
        found.append(occurrence.at)
        if len(found) > MAX_OCCURRENCES:
            raise RangeError(
                f"the range holds more than {MAX_OCCURRENCES} occurrences of"
                f" {subject}; split it into smaller ranges"
            )
    return found


def insert(
    conn: Connection,
    definition: Definition,
    batch: list[datetime],
    *,
    requested_by: str | None,
    parameters: Mapping[str, str] | None = None,
) -> int:
    """Queue these occurrences (at most a batch); how many were new."""
    rows = conn.execute(
        queries.get("insert_backfill"),
        {
            "definition_id": definition.id,
            "scheduled_for": batch,
            "requested_by": requested_by,
            "parameters": json.dumps(dict(parameters)) if parameters else None,
        },
    ).fetchall()
    return len(rows)


def queue(
    conn: Connection,
    definition: Definition,
    wanted: list[datetime],
    *,
    requested_by: str | None,
    parameters: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Queue every occurrence in batches; (newly queued, queued by an earlier backfill).
    ``parameters``: values checked by the caller, recorded with each run queued.
    ``progress`` is told how many occurrences were handled after each batch."""
    queued = 0
    for head in range(0, len(wanted), INSERT_BATCH):
        batch = wanted[head : head + INSERT_BATCH]
        queued += insert(conn, definition, batch, requested_by=requested_by, parameters=parameters)
        if progress is not None:
            progress(head + len(batch))
    return queued, len(wanted) - queued


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
