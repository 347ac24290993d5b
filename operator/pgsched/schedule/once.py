"""One-shot schedules: ``runAt``, a single date-time.

``2026-12-24T18:00:00`` (no offset) is a wall-clock time in the definition's time zone and
goes through the same DST rules as recurring schedules; ``2026-12-24T16:00:00Z`` or
``…+02:00`` is an absolute instant and is used as given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from pgsched.schedule import budget
from pgsched.schedule.errors import ScheduleError


@dataclass(frozen=True)
class OneShot:
    text: str
    wall: datetime | None  # naive local time, when given without an offset
    instant: datetime | None  # UTC, when given with an offset
    is_interval: bool = False

    def wall_times(self, start: datetime, spend: budget.Budget) -> Iterator[datetime]:
        if self.wall is not None and self.wall >= start:
            yield self.wall


def parse(text: str) -> OneShot:
    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise ScheduleError(
            f"{text!r} is not an ISO 8601 date-time", example="2026-12-24T18:00:00"
        ) from None
    if len(value) <= 10:
        raise ScheduleError(
            f"{text!r} is a date without a time of day", example=f"{value}T09:00:00"
        )
    if not budget.FIRST_INSTANT.year < parsed.year < budget.LAST_INSTANT.year:
        raise ScheduleError(
            f"{text!r}: year {parsed.year} is outside"
            f" {budget.FIRST_INSTANT.year + 1}..{budget.LAST_INSTANT.year - 1}",
            example="2026-12-24T18:00:00",
        )
    if parsed.tzinfo is None:
        return OneShot(text=value, wall=parsed.replace(microsecond=0), instant=None)
    return OneShot(text=value, wall=None, instant=parsed.astimezone(UTC))
