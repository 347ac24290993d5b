"""The RRULE value grammar of RFC 5545 (section 3.3.10), checked part by part.

python-dateutil parses far more than RFC 5545 allows and quietly reinterprets the rest
(``INTERVAL=0`` loops forever, ``BYDAY=1MO`` with ``FREQ=DAILY`` drops the ordinal,
``BYMONTHDAY`` with ``FREQ=WEEKLY`` is applied although the RFC forbids it, unknown
parts such as ``BYEASTER`` are accepted). So pgsched never hands rule text to dateutil:
this module parses it, rejects every value and combination the RFC does not allow, with
a message naming the part and a valid example, and returns plain values that
:mod:`pgsched.schedule.rrule` gives dateutil as keyword arguments.

Beyond the RFC, pgsched bounds what it expands (:mod:`pgsched.schedule.budget`): COUNT at
most 10,000 and INTERVAL at most 1,000,000. ``BYSECOND=60`` (a leap second, allowed by
the RFC) is rejected: pgsched's clock, like POSIX time, never shows second 60, so such an
occurrence would silently never happen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from pgsched.schedule import budget
from pgsched.schedule.errors import ScheduleError

FREQUENCIES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
MAX_INTERVAL = 1_000_000

_INTEGER = re.compile(r"^[+-]?\d{1,6}$", re.ASCII)
_WEEKDAY = re.compile(r"^([+-]?\d{1,2})?([A-Z]{2})$", re.ASCII)
_DATE = re.compile(r"^\d{8}$", re.ASCII)
_DATE_TIME = re.compile(r"^\d{8}T\d{6}Z?$", re.ASCII)


@dataclass(frozen=True)
class _ListPart:
    low: int
    high: int
    signed: bool  # negative values count from the end; zero is never allowed then
    example: str


_LISTS = {
    "BYSECOND": _ListPart(0, 60, False, "FREQ=MINUTELY;BYSECOND=0,30"),
    "BYMINUTE": _ListPart(0, 59, False, "FREQ=HOURLY;BYMINUTE=0,30"),
    "BYHOUR": _ListPart(0, 23, False, "FREQ=DAILY;BYHOUR=8"),
    "BYMONTHDAY": _ListPart(1, 31, True, "FREQ=MONTHLY;BYMONTHDAY=1,-1"),
    "BYYEARDAY": _ListPart(1, 366, True, "FREQ=YEARLY;BYYEARDAY=1,-1"),
    "BYWEEKNO": _ListPart(1, 53, True, "FREQ=YEARLY;BYWEEKNO=1;BYDAY=MO"),
    "BYMONTH": _ListPart(1, 12, False, "FREQ=YEARLY;BYMONTH=1,7"),
    "BYSETPOS": _ListPart(1, 366, True, "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"),
}
_PARTS = ("FREQ", "UNTIL", "COUNT", "INTERVAL", "BYDAY", "WKST", *_LISTS)


@dataclass(frozen=True)
class RuleParts:
    """One validated RRULE value. ``until`` is a naive wall-clock time in the rule's zone."""

    freq: str
    interval: int = 1
    count: int | None = None
    until: datetime | None = None
    bysecond: tuple[int, ...] = ()
    byminute: tuple[int, ...] = ()
    byhour: tuple[int, ...] = ()
    byday: tuple[tuple[int | None, int], ...] = ()  # (ordinal or None, weekday 0=MO)
    bymonthday: tuple[int, ...] = ()
    byyearday: tuple[int, ...] = ()
    byweekno: tuple[int, ...] = ()
    bymonth: tuple[int, ...] = ()
    bysetpos: tuple[int, ...] = ()
    wkst: int = 0


def parse_rule(value: str, *, zone: ZoneInfo, dtstart_is_date: bool) -> RuleParts:
    """Parse and check an RRULE value such as ``FREQ=DAILY;BYHOUR=8``.

    ``UNTIL`` may be a local date-time, a UTC date-time (``…Z``, which RFC 5545 requires
    when DTSTART has a TZID) or a date; a UTC one is converted to wall-clock time in
    ``zone``, a date means the end of that local day (UNTIL is inclusive).
    """
    raw: dict[str, str] = {}
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        name, equals, text = item.partition("=")
        name = name.strip().upper()
        if not equals or not text.strip():
            raise ScheduleError(
                f"rule part {item!r} has no value; rule parts are NAME=VALUE",
                example="FREQ=DAILY;BYHOUR=8",
            )
        if name not in _PARTS:
            raise ScheduleError(
                f"{name} is not an RFC 5545 rule part; use {', '.join(_PARTS)}",
                example="FREQ=DAILY;BYHOUR=8",
            )
        if name in raw:
            raise ScheduleError(
                f"{name} is given twice; give each rule part once, with a list of values",
                example="FREQ=DAILY;BYHOUR=8,20",
            )
        raw[name] = text.strip().upper()
    freq = raw.get("FREQ")
    if freq is None:
        raise ScheduleError("FREQ is required in every RRULE", example="FREQ=DAILY;BYHOUR=8")
    if freq not in FREQUENCIES:
        raise ScheduleError(
            f"FREQ={freq} is not one of {', '.join(FREQUENCIES)}", example="FREQ=WEEKLY;BYDAY=MO"
        )
    lists = {name.lower(): _numbers(name, raw[name]) for name in _LISTS if name in raw}
    parts = RuleParts(
        freq=freq,
        interval=_positive(raw, "INTERVAL", high=MAX_INTERVAL, example="FREQ=WEEKLY;INTERVAL=2"),
        count=_positive(raw, "COUNT", high=budget.MAX_COUNT, example="FREQ=DAILY;COUNT=10")
        if "COUNT" in raw
        else None,
        until=_until(raw["UNTIL"], zone=zone, dtstart_is_date=dtstart_is_date)
        if "UNTIL" in raw
        else None,
        byday=_weekdays(raw["BYDAY"]) if "BYDAY" in raw else (),
        wkst=_weekday(raw["WKST"], "WKST") if "WKST" in raw else 0,
        **lists,
    )
    _check_combinations(parts, raw)
    return parts


def _positive(raw: dict[str, str], name: str, *, high: int, example: str) -> int:
    text = raw.get(name, "1")
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or not 1 <= int(text) <= high:
        raise ScheduleError(f"{name}={text} must be an integer in 1..{high}", example=example)
    return int(text)


def _numbers(name: str, text: str) -> tuple[int, ...]:
    spec = _LISTS[name]
    values: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not _INTEGER.match(item):
            raise ScheduleError(f"{name}={text}: {item!r} is not an integer", example=spec.example)
        number = int(item)
        if spec.signed:
            ok = number != 0 and spec.low <= abs(number) <= spec.high
            allowed = f"{spec.low}..{spec.high} or -{spec.high}..-{spec.low}"
        else:
            ok = not item.startswith(("+", "-")) and spec.low <= number <= spec.high
            allowed = f"{spec.low}..{spec.high}"
        if not ok:
            raise ScheduleError(f"{name}={item} is out of range {allowed}", example=spec.example)
        if name == "BYSECOND" and number == 60:
            raise ScheduleError(
                "BYSECOND=60 is a leap second, which pgsched's clock (like POSIX time) never"
                " shows, so it would never occur",
                example=spec.example,
            )
        if number in values:
            raise ScheduleError(f"{name}={text} lists {item} twice", example=spec.example)
        values.append(number)
    return tuple(values)


def _weekday(text: str, name: str) -> int:
    if text not in WEEKDAYS:
        raise ScheduleError(
            f"{name}={text} is not a weekday; use one of {', '.join(WEEKDAYS)}",
            example="FREQ=WEEKLY;BYDAY=MO,FR",
        )
    return WEEKDAYS.index(text)


def _weekdays(text: str) -> tuple[tuple[int | None, int], ...]:
    days: list[tuple[int | None, int]] = []
    for item in text.split(","):
        item = item.strip()
        match = _WEEKDAY.match(item)
        if not match:
            raise ScheduleError(
                f"BYDAY={text}: {item!r} is not a weekday like MO or an ordinal weekday"
                " like 1MO or -1FR",
                example="FREQ=MONTHLY;BYDAY=1MO",
            )
        ordinal = int(match.group(1)) if match.group(1) else None
        if ordinal is not None and not 1 <= abs(ordinal) <= 53:
            raise ScheduleError(
                f"BYDAY={item}: the ordinal {ordinal} is out of range 1..53 or -53..-1",
                example="FREQ=MONTHLY;BYDAY=-1FR",
            )
        day = (ordinal, _weekday(match.group(2), "BYDAY"))
        if day in days:
            raise ScheduleError(f"BYDAY={text} lists {item} twice", example="FREQ=WEEKLY;BYDAY=MO")
        days.append(day)
    return tuple(days)


def _until(text: str, *, zone: ZoneInfo, dtstart_is_date: bool) -> datetime:
    if dtstart_is_date and not _DATE.match(text):
        # RFC 5545: UNTIL has the value type of DTSTART.
        raise ScheduleError(
            f"UNTIL={text} must be a date like 20271231 because DTSTART is a date",
            example="FREQ=DAILY;UNTIL=20271231",
        )
    moment: datetime | None = None
    try:
        if _DATE.match(text):
            moment = datetime.strptime(text, "%Y%m%d") + timedelta(days=1, seconds=-1)
        elif _DATE_TIME.match(text):
            moment = datetime.strptime(text[:15], "%Y%m%dT%H%M%S")
            if text.endswith("Z"):
                moment = moment.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None)
    except (ValueError, OverflowError):
        moment = None
    if moment is None:
        raise ScheduleError(
            f"UNTIL={text} is not a date-time like 20271231T235959 (local),"
            " 20271231T215959Z (UTC) or a date like 20271231",
            example="FREQ=DAILY;UNTIL=20271231T235959",
        )
    return min(moment, budget.LAST_WALL)


def _check_combinations(parts: RuleParts, raw: dict[str, str]) -> None:
    """The MUST NOTs of RFC 5545 section 3.3.10."""
    if parts.count is not None and parts.until is not None:
        raise ScheduleError(
            "COUNT and UNTIL must not both be given (RFC 5545); pick one",
            example="FREQ=DAILY;COUNT=10",
        )
    ordinals = [day for day in parts.byday if day[0] is not None]
    if ordinals and parts.freq not in ("MONTHLY", "YEARLY"):
        raise ScheduleError(
            f"BYDAY={raw['BYDAY']}: ordinal weekdays like 1MO are only allowed with"
            f" FREQ=MONTHLY or FREQ=YEARLY, not FREQ={parts.freq}",
            example="FREQ=MONTHLY;BYDAY=1MO",
        )
    if ordinals and len(ordinals) < len(parts.byday):
        # RFC 5545 makes the BYDAY list a union; dateutil would demand both kinds at once
        # (BYDAY=TH,21TU: a Thursday that is also the 21st Tuesday, i.e. never).
        raise ScheduleError(
            f"BYDAY={raw['BYDAY']} mixes plain and ordinal weekdays, which pgsched cannot"
            " expand as RFC 5545 means (either kind matching); put each kind in its own"
            " RRULE line",
            example="RRULE:FREQ=MONTHLY;BYDAY=TH\\nRRULE:FREQ=MONTHLY;BYDAY=-1TU",
        )
    in_month = parts.freq == "MONTHLY" or bool(parts.bymonth)
    if in_month and any(abs(ordinal) > 5 for ordinal, _ in ordinals if ordinal is not None):
        # Within a month the ordinal counts that month's weekdays, of which there are at
        # most five (dateutil crashes on 8MO instead of matching nothing).
        raise ScheduleError(
            f"BYDAY={raw['BYDAY']}: a month has at most 5 of each weekday, so ordinals"
            " within a month are 1..5 or -5..-1",
            example="FREQ=MONTHLY;BYDAY=-1FR",
        )
    if ordinals and parts.freq == "YEARLY" and parts.byweekno:
        raise ScheduleError(
            f"BYDAY={raw['BYDAY']}: ordinal weekdays must not be combined with BYWEEKNO",
            example="FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO",
        )
    if parts.bymonthday and parts.freq == "WEEKLY":
        raise ScheduleError(
            "BYMONTHDAY is not allowed with FREQ=WEEKLY (RFC 5545); use FREQ=MONTHLY",
            example="FREQ=MONTHLY;BYMONTHDAY=15",
        )
    if parts.byyearday and parts.freq in ("DAILY", "WEEKLY", "MONTHLY"):
        raise ScheduleError(
            f"BYYEARDAY is not allowed with FREQ={parts.freq} (RFC 5545); use FREQ=YEARLY",
            example="FREQ=YEARLY;BYYEARDAY=100",
        )
    if parts.byweekno and parts.freq != "YEARLY":
        raise ScheduleError(
            f"BYWEEKNO is only allowed with FREQ=YEARLY, not FREQ={parts.freq}",
            example="FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO",
        )
    others = set(raw) & {name for name in (*_LISTS, "BYDAY") if name != "BYSETPOS"}
    if parts.bysetpos and not others:
        raise ScheduleError(
            "BYSETPOS needs another BYxxx part to pick from (RFC 5545)",
            example="FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        )
