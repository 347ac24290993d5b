"""Several schedules as one: the union of their occurrences (``spec.schedules``).

"08:30 on weekdays and 10:00 on Saturdays" is two cron entries; each entry may have its
own time zone. The union yields every occurrence of every entry in instant order, and an
instant two entries share once (one run, not two): the entry listed first gives it its
zone (where calendars judge its day) and its DST flag.

The recurrence budget covers the union as a whole: each of the ``n`` entries may spend
``limit // n`` steps finding its next occurrence, so a union costs what one schedule may.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from pgsched.schedule import budget
from pgsched.schedule.timeline import Occurrence, Schedule, Stream

MAX_ENTRIES = 10


@dataclass(frozen=True)
class Union(Stream):
    entries: tuple[Schedule, ...]

    @property
    def zone_name(self) -> str:
        return self.entries[0].zone_name

    def occurrences_after(
        self, after: datetime, *, limit: int = budget.MAX_STEPS
    ) -> Iterator[Occurrence]:
        share = max(1, limit // len(self.entries))
        streams = [
            (
                (occurrence.at, index, occurrence)
                for occurrence in entry.occurrences_after(after, limit=share)
            )
            for index, entry in enumerate(self.entries)
        ]
        last: datetime | None = None
        for at, _index, occurrence in heapq.merge(*streams, key=lambda item: item[:2]):
            if at != last:
                last = at
                yield occurrence
