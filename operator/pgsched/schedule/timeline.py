"""A schedule: a recurrence in a time zone under a DST policy, as a stream of instants.

This is the single code path that turns a definition into occurrence instants: the
materializer, ``status.nextRuns`` and ``pgsched next`` all call
:meth:`Schedule.occurrences_after`, so what the CLI predicts is what the engine runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from pgsched.schedule import budget, zones
from pgsched.schedule.once import OneShot


class Recurrence(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def is_interval(self) -> bool: ...

    def wall_times(self, start: datetime, spend: budget.Budget) -> Iterator[datetime]: ...


@dataclass(frozen=True)
class Occurrence:
    at: datetime  # UTC instant
    skipped: bool = False  # a DST-gap occurrence under the "skip" policy
    # The zone of the schedule that produced it: calendars judge its day there.
    zone: ZoneInfo | None = field(default=None, compare=False)


class Exclusions(Protocol):
    """What keeps an occurrence from running (:class:`pgsched.schedule.calendars.Calendars`)."""

    def excluding(self, occurrence: Occurrence) -> str | None: ...


class Stream:
    """What every schedule offers on top of its ``occurrences_after``."""

    def occurrences_after(
        self, after: datetime, *, limit: int = budget.MAX_STEPS
    ) -> Iterator[Occurrence]:
        raise NotImplementedError

    def next_after(self, after: datetime, *, limit: int = budget.MAX_STEPS) -> Occurrence | None:
        return next(self.occurrences_after(after, limit=limit), None)

    def upcoming(
        self, after: datetime, *, count: int, exclusions: Exclusions | None = None
    ) -> list[Occurrence]:
        """The next ``count`` occurrences that will run: DST-skipped ones and those a
        calendar of ``exclusions`` excludes are left out. Passing over excluded ones is
        charged to a budget of its own, so a calendar that excludes (nearly) every day
        gets a precise error rather than a walk to the year 9000."""
        found: list[Occurrence] = []
        passed = budget.Budget("the calendars in spec.calendars.exclude")
        for occurrence in self.occurrences_after(after):
            if occurrence.skipped:
                continue
            if exclusions is not None and exclusions.excluding(occurrence) is not None:
                passed.spend()
                continue
            passed.found()
            found.append(occurrence)
            if len(found) == count:
                break
        return found


@dataclass(frozen=True)
class Schedule(Stream):
    recurrence: Recurrence
    zone: ZoneInfo
    dst: zones.DstPolicy

    @property
    def zone_name(self) -> str:
        return self.zone.key

    def occurrences_after(
        self, after: datetime, *, limit: int = budget.MAX_STEPS
    ) -> Iterator[Occurrence]:
        """Every occurrence strictly after the instant ``after``, in increasing order,
        each instant once, up to :data:`budget.LAST_INSTANT`.

        Finding each next occurrence may cost at most ``limit`` steps
        (:mod:`pgsched.schedule.budget`); past that it raises ``ScheduleError``.
        """
        if isinstance(self.recurrence, OneShot) and self.recurrence.instant is not None:
            if self.recurrence.instant > after:
                yield Occurrence(self.recurrence.instant, zone=self.zone)
            return
        if after >= budget.LAST_INSTANT - zones.MAX_OFFSET_JUMP * 2:
            return
        spend = budget.Budget(self.recurrence.text, limit=limit)
        start = zones.to_wall(max(after, budget.FIRST_INSTANT), self.zone)
        if zones.transition_near(after, self.zone):
            start -= zones.MAX_OFFSET_JUMP
        # Wall-clock order and instant order differ only around a repeat (with "both",
        # 01:30 EST comes after 01:45 EDT), so buffer instants in a heap and release one
        # once no later wall-clock time can produce an earlier instant.
        pending: list[tuple[datetime, bool]] = []
        last: datetime | None = None
        for wall in self.recurrence.wall_times(start, spend):
            if wall >= budget.LAST_WALL:
                break
            floor = zones.earliest(wall, self.zone)
            while pending and pending[0][0] < floor:
                at, skipped = heapq.heappop(pending)
                if at != last:
                    last = at
                    spend.found()
                    yield Occurrence(at, skipped, self.zone)
            for instant in zones.resolve(
                wall, self.zone, self.dst, interval=self.recurrence.is_interval
            ):
                if instant.at > after:
                    heapq.heappush(pending, (instant.at, instant.skipped))
        while pending:
            at, skipped = heapq.heappop(pending)
            if at != last:
                last = at
                yield Occurrence(at, skipped, self.zone)


def utc(moment: datetime) -> datetime:
    """An aware datetime in UTC (naive input is taken to be UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
