"""Five-field cron expressions, evaluated on naive local wall-clock times.

This module knows nothing about time zones: it answers "which local wall-clock minutes
match?" and leaves the mapping of wall-clock times to instants (and the DST gap and repeat
rules) to :mod:`pgsched.schedule.zones`. Keeping the two apart is what lets a daily 02:30
job be resolved by one documented rule instead of by whatever a cron library does.

Supported syntax (Vixie cron plus Jenkins' hash field):

- fields ``minute hour day-of-month month day-of-week``; ``*``, ``a-b``, ``a-b/n``, ``*/n``,
  ``a/n`` (from a to the field's end), lists ``a,b,c``; month names ``JAN``-``DEC`` and day
  names ``SUN``-``SAT`` (case-insensitive); day-of-week 0-7 with both 0 and 7 meaning Sunday;
- macros ``@yearly`` ``@annually`` ``@monthly`` ``@weekly`` ``@daily`` ``@midnight`` ``@hourly``;
- ``H``, ``H/n``, ``H(a-b)`` and ``H(a-b)/n``: a value picked deterministically from a hash
  of the definition (its ``namespace/name``), so a thousand ``H * * * *`` jobs spread over
  the hour instead of all starting at minute 0;
- when both day-of-month and day-of-week are restricted, a day matches if *either* matches
  (the classic cron rule).
"""

from __future__ import annotations

import calendar
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from pgsched.schedule import budget
from pgsched.schedule.errors import ScheduleError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

# Searching further than this without a match means the expression can never fire
# (e.g. "0 0 30 2 *"). Leap days recur within 8 years, so 9 is enough for any valid one.
_SEARCH_YEARS = 9


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _DAYS),
)

_HASH = re.compile(r"^H(?:\((\d{1,6})-(\d{1,6})\))?(?:/(\d{1,6}))?$", re.ASCII)


@dataclass(frozen=True)
class CronExpression:
    """A parsed cron expression: the set of matching values per field."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool
    hour_is_wildcard: bool

    @property
    def is_interval(self) -> bool:
        """True for schedules that repeat within the day on every hour (``0 * * * *``).

        Such schedules follow elapsed time across DST transitions (see
        :mod:`pgsched.schedule.zones`); schedules at fixed hours follow the wall clock.
        """
        return self.hour_is_wildcard

    def wall_times(self, start: datetime, spend: budget.Budget) -> Iterator[datetime]:
        """Yield every matching naive wall-clock time >= ``start``, in increasing order.

        Stops after searching ~9 years without a match; one step of ``spend`` per day
        looked at (a month the expression excludes is passed over in one step: a yearly
        job's next occurrences take a dozen steps a year, not 365).
        """
        start = start.replace(second=0, microsecond=0) + (
            timedelta(minutes=1) if start.second or start.microsecond else timedelta()
        )
        day = start.date()
        last_day = day + timedelta(days=366 * _SEARCH_YEARS)
        while day <= last_day and day < budget.LAST_WALL.date():
            spend.spend()
            if day.month not in self.months:
                day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
                continue
            if self._day_matches(day):
                last_day = day + timedelta(days=366 * _SEARCH_YEARS)
                for hour in self.hours:
                    if day == start.date() and hour < start.hour:
                        continue
                    for minute in self.minutes:
                        moment = datetime(day.year, day.month, day.day, hour, minute)
                        if moment >= start:
                            yield moment
            day += timedelta(days=1)

    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow


def parse(text: str, *, hash_seed: str = "") -> CronExpression:
    """Parse a cron expression or macro.

    ``hash_seed`` feeds the ``H`` field (use the definition's ``namespace/name``).
    Raises :class:`ScheduleError` naming the field, the bad value and a valid example.
    """
    expr = text.strip()
    if expr.startswith("@"):
        if expr.lower() not in MACROS:
            raise ScheduleError(
                f"unknown macro {expr!r}; use one of {', '.join(sorted(MACROS))}",
                example="@hourly",
            )
        expr = MACROS[expr.lower()]
    parts = expr.split()
    if len(parts) != 5:
        raise ScheduleError(
            f"{text!r} has {len(parts)} fields, expected 5 "
            "(minute hour day-of-month month day-of-week)",
            example="30 8 * * MON-FRI",
        )
    values = [
        _parse_field(part, field, hash_seed=f"{hash_seed}#{index}")
        for index, (part, field) in enumerate(zip(parts, _FIELDS, strict=True))
    ]
    minutes, hours, doms, months, dows = values
    if 7 in dows:
        dows = (dows - {7}) | {0}
    parsed = CronExpression(
        text=text.strip(),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_month=frozenset(doms),
        months=frozenset(months),
        days_of_week=frozenset(dows),
        dom_restricted=not parts[2].startswith("*"),
        dow_restricted=not parts[4].startswith("*"),
        hour_is_wildcard=parts[1].startswith("*"),
    )
    if next(parsed.wall_times(datetime(2000, 1, 1), budget.Budget(text)), None) is None:
        raise ScheduleError(
            f"{text!r} never fires: no day matches day-of-month {parts[2]!r} in month {parts[3]!r}",
            example="0 0 28 2 *",
        )
    return parsed


def _parse_field(text: str, field: _Field, *, hash_seed: str) -> set[int]:
    if not text:
        raise ScheduleError(f"{field.name} is empty", example="*")
    values: set[int] = set()
    for item in text.split(","):
        values |= _parse_item(item, field, hash_seed=hash_seed)
    return values


def _parse_item(item: str, field: _Field, *, hash_seed: str) -> set[int]:
    high = 6 if field.name == "day-of-week" else field.high
    hashed = _HASH.match(item.upper())
    if hashed:
        return _parse_hash(item, field, hashed, hash_seed=hash_seed)
    body, _, step_text = item.partition("/")
    step = _parse_step(item, step_text, field) if step_text else 1
    if body in ("*", "?"):
        low, top = field.low, high
    elif "-" in body:
        first, _, last = body.partition("-")
        low, top = _value(first, field, item), _value(last, field, item)
        if low > top:
            raise ScheduleError(
                f"{field.name} range {item!r} runs backwards ({low} > {top})",
                example=f"{field.low}-{field.high}",
            )
    else:
        low = _value(body, field, item)
        top = high if step_text else low
    return set(range(low, top + 1, step))


def _parse_hash(item: str, field: _Field, match: re.Match[str], *, hash_seed: str) -> set[int]:
    high = 6 if field.name == "day-of-week" else field.high
    low, top = field.low, high
    if field.name == "day-of-month":
        top = 28  # H must fire every month, so it never picks 29-31
    if match.group(1) is not None:
        low = _value(match.group(1), field, item)
        top = _value(match.group(2), field, item)
        if low > top:
            raise ScheduleError(
                f"{field.name} hash range {item!r} runs backwards", example="H(0-29)"
            )
    step = _parse_step(item, match.group(3), field) if match.group(3) else 0
    digest = int.from_bytes(hashlib.sha256(hash_seed.encode()).digest()[:8], "big")
    if step:
        offset = low + digest % min(step, top - low + 1)
        return set(range(offset, top + 1, step))
    return {low + digest % (top - low + 1)}


def _parse_step(item: str, text: str, field: _Field) -> int:
    if not _is_number(text) or int(text) == 0:
        raise ScheduleError(
            f"{field.name} step in {item!r} must be a positive integer", example="*/15"
        )
    return int(text)


def _value(text: str, field: _Field, item: str) -> int:
    upper = text.upper()
    if upper in field.names:
        return field.names[upper]
    if not _is_number(text):
        names = f" or a name like {next(iter(field.names))}" if field.names else ""
        raise ScheduleError(
            f"{field.name} value {text!r} in {item!r} is not a number{names}",
            example=_EXAMPLES[field.name],
        )
    value = int(text)
    if not field.low <= value <= field.high:
        raise ScheduleError(
            f"{field.name} value {value} in {item!r} is out of range {field.low}-{field.high}",
            example=_EXAMPLES[field.name],
        )
    return value


def _is_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts '²' (which ``int`` refuses) and
    other scripts' digits, and a 5,000-digit number exceeds ``int``'s limit."""
    return text.isascii() and text.isdigit() and len(text) <= 6


_EXAMPLES = {
    "minute": "*/15 * * * *",
    "hour": "0 8 * * *",
    "day-of-month": "0 0 1 * *",
    "month": "0 0 1 JAN *",
    "day-of-week": "0 9 * * MON-FRI",
}
