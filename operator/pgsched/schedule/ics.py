"""A small, strict reader of iCalendar (RFC 5545) files: the days their VEVENTs cover.

A Calendar may import a public-holiday feed saved into a ConfigMap. pgsched needs only
which *days* each event covers, so this reader takes from every VEVENT its DTSTART, its
end (DTEND or a DURATION in days or weeks) and an optional RRULE with EXDATE and RDATE,
and skips everything else. Dates are taken as written; DTEND is exclusive.

The input is a tenant's text, so the reader is bounded before anything else is done
(:data:`MAX_BYTES`, :data:`MAX_LINE`, :data:`MAX_DEPTH`, :data:`MAX_EVENTS`) and reads it
once, line by line, with no backtracking expression. Every error names the line and what is
wrong but never quotes the text: the operator reads a ConfigMap its Calendar's author may
not be allowed to read, and the error lands in the Calendar's status.

What is read and the bounds: docs/scheduling.md, "Calendars: days a job does not run".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from pgsched.schedule.errors import ScheduleError

MAX_BYTES = 1_048_576  # what a ConfigMap holds
MAX_LINE = 4096
MAX_DEPTH = 4
MAX_EVENTS = 5000
# An event with an RRULE is checked against every occurrence it may exclude: few of them.
MAX_RULE_EVENTS = 100
MAX_SPAN_DAYS = 366
_EXAMPLE = "BEGIN:VEVENT\\nDTSTART;VALUE=DATE:20270101\\nEND:VEVENT"
_NAME = re.compile(r"[A-Za-z0-9-]{1,64}", re.ASCII)
_DATE = re.compile(r"\d{8}", re.ASCII)
_DATE_TIME = re.compile(r"(\d{8})T(\d{6})Z?", re.ASCII)
_DURATION = re.compile(r"\+?P(\d{1,4})([DW])", re.ASCII)
_READ = {"DTSTART", "DTEND", "DURATION", "RRULE", "EXDATE", "RDATE", "STATUS"}


@dataclass(frozen=True)
class Event:
    """The days one VEVENT covers: ``start`` up to ``end`` (exclusive), repeated by
    ``rule`` (RRULE text with DTSTART, EXDATE and RDATE as dates) when it has one."""

    start: date
    end: date
    rule: str | None
    line: int

    @property
    def days(self) -> int:
        return (self.end - self.start).days


def read(text: str) -> list[Event]:
    """Every VEVENT of an iCalendar text. Raises ``ScheduleError`` naming the first bad line."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise ScheduleError(
            f"the iCalendar text is larger than {MAX_BYTES} bytes; split it into several Calendars",
            example=_EXAMPLE,
        )
    events: list[Event] = []
    stack: list[str] = []
    event: dict[str, list[tuple[str, str, int]]] | None = None
    event_line = 0
    seen_calendar = False
    for number, line in _unfolded(text):
        name, params, value = _split(line, number)
        if name == "BEGIN":
            component = value.upper()
            if not stack and (component != "VCALENDAR" or seen_calendar):
                raise _error(number, "expected BEGIN:VCALENDAR first, and only once")
            if len(stack) >= MAX_DEPTH:
                raise _error(number, f"components are nested more than {MAX_DEPTH} deep")
            if component == "VEVENT" and stack == ["VCALENDAR"]:
                event, event_line = {}, number
            stack.append(component)
            seen_calendar = True
            continue
        if name == "END":
            if not stack or stack[-1] != value.upper():
                open_one = stack[-1] if stack else "nothing"
                raise _error(number, f"this END does not close the open {open_one}")
            stack.pop()
            if value.upper() == "VEVENT" and stack == ["VCALENDAR"] and event is not None:
                found = _event(event, event_line)
                if found is not None:
                    events.append(found)
                    _check_counts(events, number)
                event = None
            continue
        if not stack:
            raise _error(number, "a property is outside BEGIN:VCALENDAR")
        if event is not None and stack[-1] == "VEVENT" and name in _READ:
            event.setdefault(name, []).append((params, value, number))
    if stack or not seen_calendar:
        raise ScheduleError(
            f"the iCalendar text ends inside {stack[-1] if stack else 'nothing'}:"
            " it must be one BEGIN:VCALENDAR ... END:VCALENDAR",
            example=_EXAMPLE,
        )
    return events


def _unfolded(text: str) -> list[tuple[int, str]]:
    """Content lines with folding undone (a line starting with a space or a tab continues
    the previous one), each with the number of its first physical line."""
    lines: list[tuple[int, str]] = []
    parts: list[str] = []
    size = 0
    first = 0
    for number, physical in enumerate(text.splitlines(), start=1):
        if physical[:1] in (" ", "\t"):
            if not parts:
                raise _error(number, "a folded continuation line has no line before it")
            size += len(physical) - 1
            if size > MAX_LINE:
                raise _error(first, f"the unfolded line is longer than {MAX_LINE} characters")
            parts.append(physical[1:])
            continue
        if parts:
            lines.append((first, "".join(parts)))
        parts, size, first = [physical], len(physical), number
        if size > MAX_LINE:
            raise _error(number, f"the line is longer than {MAX_LINE} characters")
    if parts:
        lines.append((first, "".join(parts)))
    return [(number, line) for number, line in lines if line.strip()]


def _split(line: str, number: int) -> tuple[str, str, str]:
    """``NAME;PARAMS:VALUE`` (a colon inside a quoted parameter value does not end it)."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == ":" and not quoted:
            head, value = line[:index], line[index + 1 :]
            name, _, params = head.partition(";")
            if not _NAME.fullmatch(name):
                break
            return name.upper(), params, value.strip()
    raise _error(number, "is not a content line NAME:VALUE", joined=False)


def _event(props: dict[str, list[tuple[str, str, int]]], line: int) -> Event | None:
    status = props.get("STATUS")
    if status and status[0][1].upper() == "CANCELLED":
        return None
    start_prop = _one(props, "DTSTART", line, required=True)
    assert start_prop is not None
    start, start_timed = _day(*start_prop, what="DTSTART")
    end_prop = _one(props, "DTEND", line, required=False)
    duration = _one(props, "DURATION", line, required=False)
    if end_prop is not None and duration is not None:
        raise _error(end_prop[2], "an event has both DTEND and DURATION")
    if end_prop is not None:
        end, end_timed = _day(*end_prop, what="DTEND")
        if end_timed is not None and end_timed != "000000":
            end += timedelta(days=1)  # an end after midnight covers its own day
    elif duration is not None:
        match = _DURATION.fullmatch(duration[1].upper())
        if match is None:
            raise _error(duration[2], "DURATION is not whole days like P1D or P2W")
        unit = 7 if match.group(2) == "W" else 1
        end = start + timedelta(days=max(1, int(match.group(1)) * unit))
    else:
        end = start + timedelta(days=1)
    if end < start:
        raise _error(line, f"the event ends ({end}) before it starts ({start})")
    end = max(end, start + timedelta(days=1))
    if start_timed is not None and (end - start).days > MAX_SPAN_DAYS:
        raise _error(line, f"the event spans more than {MAX_SPAN_DAYS} days")
    rule = _rule(props, start, line)
    if rule is not None and (end - start).days > MAX_SPAN_DAYS:
        raise _error(line, f"a repeating event spans more than {MAX_SPAN_DAYS} days")
    return Event(start, end, rule, line)


def _rule(props: dict[str, list[tuple[str, str, int]]], start: date, line: int) -> str | None:
    """The RRULE of an event as date-based rule text, its EXDATE and RDATE days included."""
    rule = _one(props, "RRULE", line, required=False)
    if rule is None:
        if "EXDATE" in props or "RDATE" in props:
            raise _error(line, "EXDATE or RDATE without an RRULE")
        return None
    parts = []
    for part in rule[1].split(";"):
        key, _, value = part.partition("=")
        if key.upper() == "UNTIL":
            # UNTIL has DTSTART's value type; the days are what count here.
            match = _DATE_TIME.fullmatch(value) or _DATE.fullmatch(value)
            if match is None:
                raise _error(rule[2], "UNTIL is not a date or date-time")
            value = value[:8]
        parts.append(f"{key}={value}" if value or key else part)
    lines = [f"DTSTART;VALUE=DATE:{start:%Y%m%d}", "RRULE:" + ";".join(parts)]
    for name in ("EXDATE", "RDATE"):
        days = [
            _day(params, item.strip(), number, what=name)[0]
            for params, value, number in props.get(name, [])
            for item in value.split(",")
        ]
        if days:
            lines.append(f"{name};VALUE=DATE:" + ",".join(f"{day:%Y%m%d}" for day in days))
    return "\n".join(lines)


def _one(
    props: dict[str, list[tuple[str, str, int]]], name: str, line: int, *, required: bool
) -> tuple[str, str, int] | None:
    found = props.get(name, [])
    if len(found) > 1:
        raise _error(found[1][2], f"{name} is given twice in one event")
    if not found and required:
        raise _error(line, f"the VEVENT has no {name}")
    return found[0] if found else None


def _day(params: str, value: str, number: int, *, what: str) -> tuple[date, str | None]:
    """The day of a DATE or DATE-TIME value as written, and its time (None for a DATE)."""
    text = value.strip()
    timed = _DATE_TIME.fullmatch(text)
    digits, clock = (timed.group(1), timed.group(2)) if timed else (text, None)
    if "VALUE=DATE" in params.upper().replace("VALUE=DATE-TIME", "") and clock is not None:
        raise _error(number, f"{what} is VALUE=DATE but has a time")
    try:
        if not _DATE.fullmatch(digits):
            raise ValueError
        day = datetime.strptime(digits, "%Y%m%d").date()
        if clock is not None:
            datetime.strptime(clock, "%H%M%S")
    except ValueError:
        raise _error(number, f"{what} is not a date like 20270101 or 20270101T090000") from None
    if not 1900 <= day.year < 9000:
        raise _error(number, f"{what} year {day.year} is outside 1900..8999")
    return day, clock


def _check_counts(events: list[Event], number: int) -> None:
    if len(events) > MAX_EVENTS:
        raise _error(number, f"more than {MAX_EVENTS} events; split them into several Calendars")
    if events[-1].rule is not None and sum(1 for e in events if e.rule) > MAX_RULE_EVENTS:
        raise _error(
            number, f"more than {MAX_RULE_EVENTS} repeating events (RRULE); list the dates instead"
        )


def _error(number: int, message: str, *, joined: bool = True) -> ScheduleError:
    return ScheduleError(f"line {number}{': ' if joined else ' '}{message}", example=_EXAMPLE)
