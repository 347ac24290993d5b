"""No schedule of its own: a ScheduledJob that runs only when chained (``spec.after``)
or run by hand. Its schedule kind is ``none`` and its occurrence stream is empty, so
materializing, ``status.nextRuns``, ``pgsched next`` and backfills all see "never"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from pgsched.schedule import budget


@dataclass(frozen=True)
class Never:
    text: str = ""
    is_interval: bool = False

    def wall_times(self, start: datetime, spend: budget.Budget) -> Iterator[datetime]:
        return iter(())
