"""RFC 5545 recurrence rules (RRULE, with optional DTSTART, RDATE and EXDATE lines).

Rules are expanded by python-dateutil on *naive local wall-clock* datetimes: DTSTART is
anchored in the definition's time zone, so ``FREQ=DAILY;BYHOUR=8`` means 08:00 local, every
day, whatever the UTC offset is that day. The mapping to instants happens afterwards in
:mod:`pgsched.schedule.zones`.

When the text has no DTSTART, the anchor is local midnight of the day the definition was
created. dateutil fills every BYxxx part the rule leaves out from DTSTART, so anchoring at
"now" would turn ``FREQ=DAILY;BYHOUR=8`` into 08:23:17 for a definition created at 14:23:17;
anchoring at midnight gives the 08:00:00 users mean.

Times inside the text must be local (floating) or carry ``TZID=<the definition's zone>``;
a ``Z`` (UTC) or another zone is rejected rather than silently reinterpreted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dateutil import rrule as du_rrule
from dateutil.relativedelta import relativedelta

from pgsched.schedule.errors import ScheduleError

_EXAMPLE = "FREQ=DAILY;BYHOUR=8;BYMINUTE=30"
_INTERVAL_FREQS = {"HOURLY", "MINUTELY", "SECONDLY"}
_FREQ = re.compile(r"FREQ=([A-Z]+)", re.IGNORECASE)
_PROPERTY = re.compile(r"^(DTSTART|RRULE|RDATE|EXDATE|EXRULE)([;:])", re.IGNORECASE)
_TZID = re.compile(r"TZID=([^;:]+)", re.IGNORECASE)
_TZID_PARAM = re.compile(r";TZID=[^;:]+", re.IGNORECASE)


@dataclass(frozen=True)
class RecurrenceRule:
    text: str
    rules: du_rrule.rruleset
    is_interval: bool
    members: tuple[du_rrule.rrule, ...] = ()  # the RRULE lines of ``rules``, one by one

    def wall_times(self, start: datetime) -> Iterator[datetime]:
        """Every occurrence's naive wall-clock time >= ``start``, in increasing order."""
        yield from self._from(start).xafter(start, inc=True)

    def _from(self, start: datetime) -> du_rrule.rruleset:
        """The rule set, its RRULEs re-anchored near ``start``.

        dateutil expands a rule from its DTSTART on every call, so the cost of the next
        occurrence grows with the rule's age (a year-old minutely rule: ~0.1 s per
        materialization). Moving DTSTART forward by whole periods (FREQ x INTERVAL) to the
        last period boundary at or before ``start`` yields the same occurrences from
        ``start`` on, in constant time.
        """
        moved = [_reanchored(rule, start) for rule in self.members]
        if all(new is old for new, old in zip(moved, self.members, strict=True)):
            return self.rules
        fresh = du_rrule.rruleset()
        for rule in moved:
            fresh.rrule(rule)
        for value in _private(self.rules, "_rdate"):
            fresh.rdate(value)
        for value in _private(self.rules, "_exdate"):
            fresh.exdate(value)
        for rule in _private(self.rules, "_exrule"):
            fresh.exrule(rule)
        return fresh


def _private(obj: object, name: str) -> Any:
    """dateutil keeps the parts of a rule private; these have been stable since 2.0."""
    return getattr(obj, name)


_STEPS = {
    du_rrule.WEEKLY: timedelta(weeks=1),
    du_rrule.DAILY: timedelta(days=1),
    du_rrule.HOURLY: timedelta(hours=1),
    du_rrule.MINUTELY: timedelta(minutes=1),
    du_rrule.SECONDLY: timedelta(seconds=1),
}


def _reanchored(rule: du_rrule.rrule, start: datetime) -> du_rrule.rrule:
    """``rule`` with DTSTART moved forward by whole periods to at most ``start``.

    Only where that provably changes nothing: not with COUNT (it counts from DTSTART), and
    for MONTHLY/YEARLY only when DTSTART's day exists in every month (<= 28), because
    dateutil derives default BY-parts (weekday, day of month, time of day) from DTSTART and
    whole weeks, days, hours, months or years keep each of them.
    """
    dtstart: datetime = _private(rule, "_dtstart")
    freq: int = _private(rule, "_freq")
    interval: int = _private(rule, "_interval")
    if _private(rule, "_count") is not None or start <= dtstart:
        return rule
    if freq in _STEPS:
        period = _STEPS[freq] * interval
        moved = dtstart + period * ((start - dtstart) // period)
    elif freq == du_rrule.MONTHLY and dtstart.day <= 28:
        months = (start.year - dtstart.year) * 12 + start.month - dtstart.month
        moved = dtstart + relativedelta(months=months // interval * interval)
    elif freq == du_rrule.YEARLY and dtstart.day <= 28:
        moved = dtstart + relativedelta(years=(start.year - dtstart.year) // interval * interval)
    else:
        return rule
    while moved > start:  # the month or year arithmetic may land past start
        moved -= (
            relativedelta(months=interval)
            if freq == du_rrule.MONTHLY
            else relativedelta(years=interval)
        )
    if moved <= dtstart:
        return rule
    return rule.replace(dtstart=moved)


def parse(text: str, *, zone_name: str, anchor: datetime) -> RecurrenceRule:
    """Parse RRULE text; ``anchor`` (naive local) is DTSTART when the text has none."""
    lines = _split_lines(text)
    dtstart: datetime | None = None
    body: list[str] = []
    for line in lines:
        name = _property_name(line)
        _check_zone(line, zone_name)
        if name == "DTSTART":
            dtstart = _parse_dtstart(line, zone_name)
        else:
            # The TZID was checked to be the definition's zone; dateutil rejects it on
            # RDATE and would otherwise convert, so drop it and keep the floating time.
            body.append(_TZID_PARAM.sub("", line) if name else f"RRULE:{line}")
    if not any(_property_name(line) == "RRULE" for line in body):
        raise ScheduleError(f"{text!r} has no RRULE part", example=_EXAMPLE)
    start = dtstart or anchor.replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        rules = du_rrule.rrulestr(
            "\n".join(body), dtstart=start, forceset=True, ignoretz=True, unfold=True
        )
        # The same RRULE lines one by one, to inspect them (rruleset hides its members).
        members = [
            du_rrule.rrulestr(line.split(":", 1)[1], dtstart=start, ignoretz=True)
            for line in body
            if _property_name(line) == "RRULE"
        ]
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise ScheduleError(f"{text!r} is not a valid RRULE: {error}", example=_EXAMPLE) from None
    assert isinstance(rules, du_rrule.rruleset)
    has_rdate = any(_property_name(line) == "RDATE" for line in body)
    if not has_rdate and all(_never(rule, start) for rule in members):
        raise ScheduleError(
            f"{text!r} never produces an occurrence (its BY-parts contradict each other)",
            example=_EXAMPLE,
        )
    frequencies = {match.upper() for match in _FREQ.findall(text)}
    return RecurrenceRule(
        text=text.strip(),
        rules=rules,
        is_interval=bool(frequencies & _INTERVAL_FREQS),
        members=tuple(rule for rule in members if isinstance(rule, du_rrule.rrule)),
    )


def _split_lines(text: str) -> list[str]:
    lines = [line.strip() for line in text.strip().replace("\\n", "\n").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise ScheduleError("the RRULE is empty", example=_EXAMPLE)
    return lines


def _property_name(line: str) -> str | None:
    match = _PROPERTY.match(line)
    return match.group(1).upper() if match else None


def _check_zone(line: str, zone_name: str) -> None:
    for tzid in _TZID.findall(line):
        if tzid != zone_name:
            raise ScheduleError(
                f"{line!r} uses TZID={tzid} but the definition's timeZone is {zone_name}; "
                "times in the rule are local to timeZone",
                example=f"DTSTART;TZID={zone_name}:20260105T083000",
            )
    if re.search(r"\d{8}T\d{6}Z", line):
        raise ScheduleError(
            f"{line!r} gives a UTC time (trailing Z); write local times of timeZone {zone_name}",
            example="DTSTART:20260105T083000",
        )


def _parse_dtstart(line: str, zone_name: str) -> datetime:
    value = line.rsplit(":", 1)[-1].strip()
    for layout in ("%Y%m%dT%H%M%S", "%Y%m%d"):
        try:
            return datetime.strptime(value, layout)
        except ValueError:
            continue
    raise ScheduleError(
        f"DTSTART value {value!r} is not a date-time like 20260105T083000",
        example=f"DTSTART;TZID={zone_name}:20260105T083000",
    )


def _never(rule: du_rrule.rrule | du_rrule.rruleset, start: datetime) -> bool:
    """True if the rule's BY-parts match no date at all (``BYMONTH=2;BYMONTHDAY=31``).

    dateutil would search such a rule until year 9999 (seconds of CPU per call, on every
    tick), so check a yearly projection of the same BY-parts over 40 years instead: every
    date the real rule can produce is a date the projection produces.
    """
    assert isinstance(rule, du_rrule.rrule)
    projection = rule.replace(
        freq=du_rrule.YEARLY,
        interval=1,
        count=None,
        bysetpos=None,
        until=start.replace(year=start.year + 40, month=1, day=1),
    )
    return next(iter(projection), None) is None
