"""Calendars: named sets of days on which a ScheduledJob's occurrences do not run.

A ``Calendar`` resource lists excluded days — dates, inclusive date ranges, date-based
RRULEs (``FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=25``) and the events of an iCalendar file
(:mod:`pgsched.schedule.ics`) — and optionally *included* days in the same forms, which
carve exceptions out of the excluded ones (``exclude`` every Saturday, ``include`` the
one working Saturday). A day is excluded when it is in ``exclude`` and not in ``include``.

Membership is a property of a *day*, and an occurrence's day is its wall-clock date in the
zone of the schedule that produced it (:attr:`Occurrence.zone
<pgsched.schedule.timeline.Occurrence.zone>`): a job at 23:30 in America/New_York on
December 24th is excluded by a December 24th holiday even though it is the 25th in UTC.

The operator stores each Calendar in its **resolved** form (:func:`resolve` turns a spec,
with its iCalendar text read from the ConfigMap, into plain JSON of dates, ranges and rule
texts); the tick, ``status.nextRuns`` and ``pgsched next`` build :class:`Calendar` objects
from that form with :func:`from_resolved`. Everything here is pure and bounded: a rule is
expanded one year at a time within the recurrence budget, and each year's days are kept.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pgsched.schedule import budget, ics
from pgsched.schedule.errors import ScheduleError
from pgsched.schedule.timeline import Occurrence, to_local_day
from pgsched.validation import Problems, SpecError

MAX_DATES = 10_000
MAX_RANGES = ics.MAX_EVENTS
MAX_RULES = ics.MAX_RULE_EVENTS
MAX_RULE_TEXT = 2000
SECTIONS = ("exclude", "include")
_DATE_RULE_FREQS = {"YEARLY", "MONTHLY", "WEEKLY", "DAILY"}
_RULE_EXAMPLE = "RRULE:FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=25"
# A rule without DTSTART starts here (a Thursday): write DTSTART when the phase matters
# (INTERVAL=2, or a yearly rule that takes its day from DTSTART).
RULE_ANCHOR = datetime(1970, 1, 1)


@dataclass
class _Rule:
    """A date-based recurrence covering ``days`` days from each occurrence; each year's
    days are kept as merged ranges, expanded once (a daily rule whose occurrences span a
    year each is ~730 ranges merged into one, not 267,000 days)."""

    text: str
    days: int
    by_year: dict[int, tuple[tuple[date, date], ...]] = field(default_factory=dict)

    def covers(self, day: date) -> bool:
        ranges = self._year(day.year)
        index = bisect.bisect_right(ranges, (day, date.max))
        return bool(index) and ranges[index - 1][1] >= day

    def _year(self, year: int) -> tuple[tuple[date, date], ...]:
        found = self.by_year.get(year)
        if found is None:
            found = tuple(_merged(_expand(self.text, self.days, year)))
            self.by_year[year] = found
        return found


@dataclass(frozen=True)
class DaySet:
    """Dates, inclusive ranges and rules; ``ranges`` sorted by start."""

    dates: frozenset[date] = frozenset()
    ranges: tuple[tuple[date, date], ...] = ()
    rules: tuple[_Rule, ...] = ()

    def __contains__(self, day: object) -> bool:
        if not isinstance(day, date):
            return False
        if day in self.dates:
            return True
        # Ranges are merged (none overlaps another): only the last one starting on or
        # before the day can hold it.
        index = bisect.bisect_right(self.ranges, (day, date.max))
        if index and self.ranges[index - 1][1] >= day:
            return True
        return any(rule.covers(day) for rule in self.rules)


@dataclass(frozen=True)
class Calendar:
    name: str
    exclude: DaySet
    include: DaySet = DaySet()

    def excludes(self, day: date) -> bool:
        return day in self.exclude and day not in self.include


@dataclass(frozen=True)
class Calendars:
    """The calendars a job excludes, in the order its spec names them."""

    found: tuple[Calendar, ...] = ()
    missing: tuple[str, ...] = ()

    def excluding(self, occurrence: Occurrence) -> str | None:
        """The name of the first calendar that excludes the occurrence's local day."""
        if not self.found:
            return None
        day = to_local_day(occurrence.at, occurrence.zone or UTC_ZONE)
        return next((item.name for item in self.found if item.excludes(day)), None)


NO_CALENDARS = Calendars()
UTC_ZONE = ZoneInfo("UTC")


def from_resolved(name: str, resolved: Mapping[str, Any]) -> Calendar:
    """A Calendar from its stored resolved form (see :func:`resolve`)."""
    sections = {key: _day_set(resolved.get(key) or {}) for key in SECTIONS}
    return Calendar(name, sections["exclude"], sections["include"])


def _merged(ranges: Iterable[tuple[date, date]]) -> list[tuple[date, date]]:
    """Inclusive day ranges, sorted and merged: none overlaps or touches another."""
    merged: list[tuple[date, date]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + timedelta(days=1):
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _day_set(section: Mapping[str, Any]) -> DaySet:
    merged = _merged(
        (date.fromisoformat(a), date.fromisoformat(b)) for a, b in section.get("ranges", [])
    )
    return DaySet(
        dates=frozenset(date.fromisoformat(text) for text in section.get("dates", [])),
        ranges=tuple(merged),
        rules=tuple(_Rule(item["text"], int(item["days"])) for item in section.get("rules", [])),
    )


def resolve(spec: Mapping[str, Any], ics_texts: Mapping[str, str]) -> dict[str, Any]:
    """Check a Calendar spec and turn it into its resolved form, or raise ``SpecError``
    listing every bad field. ``ics_texts``: the iCalendar text of each section that has an
    ``ics`` reference (``{"exclude": "BEGIN:VCALENDAR..."}``), read by the caller."""
    problems = Problems()
    if not isinstance(spec, Mapping):
        problems.add("spec", "must be an object")
        problems.raise_if_any(SpecError)
    for key in spec:
        if key not in (*SECTIONS, "description"):
            problems.add(
                f"spec.{key}", "unknown field; known fields are description, exclude, include"
            )
    if not isinstance(spec.get("exclude"), Mapping):
        problems.add(
            "spec.exclude",
            "must be an object listing excluded days",
            "exclude: {dates: ['2027-01-01']}",
        )
    resolved: dict[str, Any] = {}
    for key in SECTIONS:
        section = spec.get(key)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            if key == "include":
                problems.add(f"spec.{key}", "must be an object", "include: {dates: ['2027-06-12']}")
            continue
        resolved[key] = _resolve_section(section, f"spec.{key}", ics_texts.get(key), problems)
    problems.raise_if_any(SpecError)
    return resolved


def ics_reference(spec: Any, section: str) -> tuple[str, str] | None:
    """The ConfigMap (name, key) a section's ``ics.configMapRef`` names, if well formed."""
    part = spec.get(section) if isinstance(spec, Mapping) else None
    ref = part.get("ics") if isinstance(part, Mapping) else None
    ref = ref.get("configMapRef") if isinstance(ref, Mapping) else None
    if not isinstance(ref, Mapping):
        return None
    name, key = ref.get("name"), ref.get("key")
    return (name, key) if isinstance(name, str) and isinstance(key, str) else None


def _resolve_section(
    section: Mapping[str, Any], path: str, ics_text: str | None, problems: Problems
) -> dict[str, Any]:
    for key in section:
        if key not in ("dates", "ranges", "rules", "ics"):
            problems.add(
                f"{path}.{key}", "unknown field; known fields are dates, ics, ranges, rules"
            )
    dates = sorted(
        {day.isoformat() for day in _dates(section.get("dates"), f"{path}.dates", problems)}
    )
    ranges: list[list[str]] = []
    for index, item in enumerate(
        _list(section.get("ranges"), f"{path}.ranges", problems, MAX_RANGES)
    ):
        where = f"{path}.ranges[{index}]"
        example = "{start: '2027-12-24', end: '2027-12-31'}"
        if not isinstance(item, Mapping) or set(item) != {"start", "end"}:
            problems.add(where, "must be an object with start and end (inclusive)", example)
            continue
        start = _date(item["start"], f"{where}.start", problems)
        end = _date(item["end"], f"{where}.end", problems)
        if start and end and end < start:
            problems.add(f"{where}.end", f"{end} is before start {start}", example)
        elif start and end:
            ranges.append([start.isoformat(), end.isoformat()])
    rules: list[dict[str, Any]] = []
    for index, text in enumerate(_list(section.get("rules"), f"{path}.rules", problems, MAX_RULES)):
        where = f"{path}.rules[{index}]"
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_RULE_TEXT:
            problems.add(
                where, f"must be RRULE text of at most {MAX_RULE_TEXT} characters", _RULE_EXAMPLE
            )
            continue
        try:
            check_rule(text.strip())
        except ScheduleError as error:
            problems.add(where, error.message, error.example)
            continue
        rules.append({"text": text.strip(), "days": 1})
    ref = section.get("ics")
    if ref is not None:
        _ics(ref, ics_text, f"{path}.ics", problems, ranges=ranges, rules=rules)
    if len(rules) > MAX_RULES:
        problems.add(
            f"{path}.rules", f"{len(rules)} rules in all, at most {MAX_RULES}", _RULE_EXAMPLE
        )
    return {"dates": dates, "ranges": ranges, "rules": rules}


def _ics(
    ref: Any,
    text: str | None,
    path: str,
    problems: Problems,
    *,
    ranges: list[list[str]],
    rules: list[dict[str, Any]],
) -> None:
    example = "ics: {configMapRef: {name: holidays, key: de-2027.ics}}"
    if not isinstance(ref, Mapping) or set(ref) != {"configMapRef"}:
        problems.add(path, "must be an object with configMapRef: {name, key}", example)
        return
    target = ref["configMapRef"]
    if (
        not isinstance(target, Mapping)
        or set(target) != {"name", "key"}
        or not all(isinstance(target[key], str) and target[key] for key in ("name", "key"))
    ):
        problems.add(f"{path}.configMapRef", "must name a ConfigMap and a key in it", example)
        return
    if text is None:
        return  # not read (admission): the controller reads and checks it
    try:
        events = ics.read(text)
    except ScheduleError as error:
        problems.add(
            path,
            f"ConfigMap {target['name']} key {target['key']}: {error.message}",
            error.example,
        )
        return
    for event in events:
        if event.rule is None:
            ranges.append([event.start.isoformat(), (event.end - timedelta(days=1)).isoformat()])
            continue
        try:
            check_rule(event.rule)
        except ScheduleError:
            # Not the rule's own words: they would quote the ConfigMap (see schedule.ics).
            problems.add(
                path,
                f"ConfigMap {target['name']} key {target['key']}: line {event.line}: the"
                " VEVENT's RRULE is not a valid date-based rule (RFC 5545, FREQ=DAILY or"
                " coarser, no BYHOUR, BYMINUTE or BYSECOND)",
                _RULE_EXAMPLE,
            )
            return
        rules.append({"text": event.rule, "days": event.days})


def check_rule(text: str) -> None:
    """Refuse a rule that is not date-based or that never gives a day."""
    from pgsched.schedule import rrule

    parsed = rrule.parse(text, zone_name="UTC", anchor=RULE_ANCHOR)
    for member in parsed.members:
        parts = member.parts
        if parts.freq not in _DATE_RULE_FREQS or parts.byhour or parts.byminute or parts.bysecond:
            raise ScheduleError(
                f"{text.splitlines()[-1]!r} repeats within a day; a calendar rule names days"
                " (FREQ=DAILY or coarser, no BYHOUR, BYMINUTE or BYSECOND)",
                example=_RULE_EXAMPLE,
            )


def _expand(text: str, days: int, year: int) -> list[tuple[date, date]]:
    """The days of ``year`` that the rule's occurrences (each covering ``days`` days)
    touch, as one inclusive range per occurrence, clipped to the year."""
    from pgsched.schedule import rrule

    if not budget.FIRST_INSTANT.year < year < budget.LAST_WALL.year:
        return []
    first = datetime(year, 1, 1) - timedelta(days=days - 1)
    stop = datetime(year + 1, 1, 1)
    parsed = rrule.parse(text, zone_name="UTC", anchor=RULE_ANCHOR)
    spend = budget.Budget(text)
    found: list[tuple[date, date]] = []
    year_start, year_end = date(year, 1, 1), date(year, 12, 31)
    try:
        for wall in parsed.wall_times(first, spend):
            if wall >= stop:
                break
            spend.found()
            start, end = wall.date(), wall.date() + timedelta(days=days - 1)
            if end >= year_start and start <= year_end:
                found.append((max(start, year_start), min(end, year_end)))
    except ScheduleError:
        # The search for a next day ran out of budget (a rule whose days are decades
        # apart, or that ended): none within reach, the days found so far are the year's.
        pass
    return found


def _list(value: Any, path: str, problems: Problems, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(path, "must be a list")
        return []
    if len(value) > limit:
        problems.add(path, f"has {len(value)} items, at most {limit}")
        return []
    return value


def _dates(value: Any, path: str, problems: Problems) -> list[date]:
    found = []
    for index, item in enumerate(_list(value, path, problems, MAX_DATES)):
        day = _date(item, f"{path}[{index}]", problems)
        if day is not None:
            found.append(day)
    return found


def _date(value: Any, path: str, problems: Problems) -> date | None:
    # YAML reads an unquoted 2027-01-01 as a date; JSON (the API) gives the string.
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    try:
        if not isinstance(value, str) or len(value) != 10:
            raise ValueError
        day = date.fromisoformat(value)
    except ValueError:
        problems.add(path, f"{str(value)[:40]!r} is not a date like 2027-01-01", "'2027-01-01'")
        return None
    if not budget.FIRST_INSTANT.year <= day.year < budget.LAST_WALL.year:
        problems.add(path, f"year {day.year} is outside 1900..8999", "'2027-01-01'")
        return None
    return day
