"""Wall-clock times to instants in an IANA time zone, with pgsched's DST rules.

Recurrences produce *wall-clock* times ("08:00 every day in Europe/Sofia"); the database
stores *instants*. Twice a year a wall-clock time has no instant (the spring-forward gap) or
two (the autumn repeat). Libraries disagree on what to do there (dateutil 2.9 and 4.0 and
zoneinfo each resolve a nonexistent time differently), so pgsched resolves them itself, by
one documented rule: fixed-time schedules follow the wall clock and run once per wall-clock
occurrence, as the ``gap`` (``shift``, ``skip``) and ``repeat`` (``first``, ``last``,
``both``) policies say; interval schedules follow elapsed time and run at every instant
whose local time matches, so the policies do not apply to them.

The rule with examples: docs/scheduling.md, "Daylight saving time".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pgsched.schedule.errors import ScheduleError

GapPolicy = Literal["shift", "skip"]
RepeatPolicy = Literal["first", "last", "both"]

# DST offsets change by at most a few hours, so a wall-clock time that maps to an instant
# after T is never more than this much earlier than T's own wall-clock time.
MAX_OFFSET_JUMP = timedelta(hours=4)


@dataclass(frozen=True)
class DstPolicy:
    gap: GapPolicy = "shift"
    repeat: RepeatPolicy = "first"


@dataclass(frozen=True)
class Instant:
    """One resolved instant of a wall-clock time.

    ``skipped`` is true for a gap occurrence under the ``skip`` policy: it is recorded
    (as ``SKIPPED/DSTGap``) at the transition instant but never run.
    """

    at: datetime
    skipped: bool = False


def load_zone(name: str) -> ZoneInfo:
    """Load an IANA zone by name, with an error that says how to fix a bad one."""
    if not name or name != name.strip() or name.startswith("/") or ".." in name:
        raise ScheduleError(f"{name!r} is not an IANA time zone name", example="Europe/Sofia")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r}; use an IANA name from the tz database",
            example="America/New_York",
        ) from None


def to_wall(at: datetime, zone: ZoneInfo) -> datetime:
    """The naive local wall-clock time of an instant."""
    return at.astimezone(zone).replace(tzinfo=None, fold=0)


def transition_near(at: datetime, zone: ZoneInfo) -> bool:
    """Whether a UTC offset change happens within MAX_OFFSET_JUMP of ``at``."""
    before = (at - MAX_OFFSET_JUMP).astimezone(zone).utcoffset()
    after = (at + MAX_OFFSET_JUMP).astimezone(zone).utcoffset()
    return before != after


def earliest(wall: datetime, zone: ZoneInfo) -> datetime:
    """The earliest instant a wall-clock time can stand for: the first of a repeated
    time, the transition itself for a time in a gap. Non-decreasing in ``wall``."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if to_wall(first, zone) == wall:
        return first
    return _gap_end(wall, zone)


def resolve(wall: datetime, zone: ZoneInfo, policy: DstPolicy, *, interval: bool) -> list[Instant]:
    """The instants at which a wall-clock occurrence runs, in increasing order."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    first_exists = to_wall(first, zone) == wall
    if first_exists and first == second:
        return [Instant(first)]
    if first_exists:  # a repeated wall-clock time: fold=0 is the earlier instant
        if interval or policy.repeat == "both":
            return [Instant(first), Instant(second)]
        return [Instant(second if policy.repeat == "last" else first)]
    if interval:
        return []
    return [Instant(_gap_end(wall, zone), skipped=policy.gap == "skip")]


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The transition instant that ends the gap containing ``wall``.

    zoneinfo maps a nonexistent time to the instant computed with the old offset (fold=0)
    or the new one (fold=1); the transition lies between the two.
    """
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if low > high:
        low, high = high, low
    return _bisect_transition(low, high, zone)


def transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[Transition]:
    """The UTC-offset changes of ``zone`` in [start, end), to the second."""
    found = []
    moment = start
    while moment < end:
        # An hour never holds two changes: every zone keeps an offset for months.
        following = min(moment + timedelta(hours=1), end)
        before, after = moment.astimezone(zone).utcoffset(), following.astimezone(zone).utcoffset()
        if before is not None and after is not None and before != after:
            found.append(Transition(_bisect_transition(moment, following, zone), before, after))
        moment = following
    return found


@dataclass(frozen=True)
class Transition:
    at: datetime
    offset_before: timedelta
    offset_after: timedelta


def _bisect_transition(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second of ``high``'s UTC offset, given one offset change in (low, high]."""
    offset_after = high.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == offset_after:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)
