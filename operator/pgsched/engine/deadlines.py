"""Finish-by deadlines: ``spec.deadline`` warns when a run has not finished in time.

``startingDeadlineSeconds`` skips a run that could not start in time and
``activeDeadlineSeconds`` kills one that runs too long; a finish-by deadline does neither.
It says "the nightly export has not finished by 06:00" and lets the run go on:

- ``deadline: 2h`` (also ``90m``, ``1h30m``, ``45s``): a duration after the run's scheduled
  instant;
- ``deadline: '06:00'``: the first such wall-clock time strictly after the scheduled
  instant, in the schedule's time zone (a run due at 23:00 must finish by 06:00 the next
  morning).

A retry is a run of its own, scheduled for its own instant, so its deadline counts from
there. ``run_once`` marks every unfinished (``QUEUED`` or ``RUNNING``) run past its
deadline, once (``pgsched.run_deadlines``), with a ``DEADLINE_MISSED`` note on the
run-events outbox in the same statement: the publisher posts a ``RunDeadlineMissed``
Warning Event and counts the metric, and the notification trigger derives the
``deadlineMissed`` notifications. The SQL function ``pgsched.finish_by`` computes the
instant, so the service and ``pgsched describe`` agree; ``spec.deadline`` is checked at
apply by ``spec.deadline``, to the forms that function casts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pgsched.db import queries

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

INTERVAL_SECONDS = 10.0
BATCH = 500


@dataclass
class DeadlineResult:
    missed: list[int] = field(default_factory=list)


def run_once(
    conn: Connection, *, limit: int = BATCH, now: datetime | None = None
) -> DeadlineResult:
    """Mark up to ``limit`` unfinished runs past their finish-by instant."""
    with conn.transaction():
        rows = conn.execute(
            queries.get("mark_missed_deadlines"), {"limit": limit, "now": now}
        ).fetchall()
    return DeadlineResult(missed=[int(row["run_id"]) for row in rows])


@dataclass(frozen=True)
class FinishBy:
    """A run's finish-by instant, and when it was found missed (None: not, or not yet)."""

    deadline_at: datetime
    missed_at: datetime | None


def finish_by(conn: Connection, run_ids: Sequence[int]) -> dict[int, FinishBy]:
    """The finish-by instants of those of ``run_ids`` whose job has a ``spec.deadline``."""
    if not run_ids:
        return {}
    rows = conn.execute(queries.get("runs_finish_by"), {"run_ids": list(run_ids)})
    return {
        int(row["run_id"]): FinishBy(row["deadline_at"], row["missed_at"])
        for row in rows
        if row["deadline_at"] is not None
    }
