"""A schedule: a recurrence in a time zone under a DST policy, as a stream of instants.

This is the single code path that turns a definition into occurrence instants: the
materializer, ``status.nextRuns`` and ``pgsched next`` all call
:meth:`Schedule.occurrences_after`, so what the CLI predicts is what the engine runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
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
        calendar of ``exclusions`` excludes are left out.

        An excluded occurrence's whole local day is passed over at once where the stream
        allows it (:meth:`resume_after`), and every excluded occurrence or day passed over
        is charged to a budget of :data:`budget.MAX_EXCLUDED` steps, so a calendar that
        excludes (nearly) every day gets a precise error rather than a walk to the year 9000.
        """
        found: list[Occurrence] = []
        passed = budget.Budget("the calendars of spec.calendars.exclude", limit=budget.MAX_EXCLUDED)
        resume: datetime | None = after
        while resume is not None and len(found) < count:
            start, resume = resume, None
            for occurrence in self.occurrences_after(start):
                if occurrence.skipped:
                    continue
                if exclusions is not None and exclusions.excluding(occurrence) is not None:
                    passed.spend()
                    resume = self.resume_after(occurrence)
                    if resume is not None:
                        break  # look again from the end of the excluded day
                    continue
                found.append(occurrence)
                if len(found) == count:
                    break
        return found

    def resume_after(self, excluded: Occurrence) -> datetime | None:
        """Where to look for the next occurrence after one on an excluded day (None: the
        next occurrence, whatever its day)."""
        return None


@dataclass(frozen=True)
class Schedule(Stream):
    recurrence: Recurrence
    zone: ZoneInfo
    dst: zones.DstPolicy

    @property
    def zone_name(self) -> str:
        return self.zone.key

    def resume_after(self, excluded: Occurrence) -> datetime | None:
        """Calendars exclude whole local days: the last instant of the excluded one."""
        day = to_local_day(excluded.at, self.zone)
        following = datetime.combine(day + timedelta(days=1), datetime.min.time())
        return zones.earliest(following, self.zone) - timedelta(microseconds=1)

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


def to_local_day(at: datetime, zone: ZoneInfo) -> date:
    return at.astimezone(zone).date()


def utc(moment: datetime) -> datetime:
    """An aware datetime in UTC (naive input is taken to be UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
