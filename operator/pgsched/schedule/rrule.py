"""RFC 5545 recurrence rules (RRULE, with optional DTSTART, RDATE and EXDATE lines).

Rules are expanded by python-dateutil on *naive local wall-clock* datetimes: DTSTART is
anchored in the definition's time zone, so ``FREQ=DAILY;BYHOUR=8`` means 08:00 local, every
day, whatever the UTC offset is that day. The mapping to instants happens afterwards in
:mod:`pgsched.schedule.zones`.

When the text has no DTSTART, the anchor is local midnight of the day the definition was
created. dateutil fills every BYxxx part the rule leaves out from DTSTART, so anchoring at
"now" would turn ``FREQ=DAILY;BYHOUR=8`` into 08:23:17 for a definition created at 14:23:17;
anchoring at midnight gives the 08:00:00 users mean. A DTSTART the rule does not match is
not itself an occurrence (RFC 5545 leaves that case undefined).

Times inside the text must be local (floating) or carry ``TZID=<the definition's zone>``;
a ``Z`` (UTC) or another zone is rejected rather than silently reinterpreted — except in
``UNTIL``, where RFC 5545 requires UTC when DTSTART has a TZID.

The text is parsed here and in :mod:`pgsched.schedule.rfc5545`, never by dateutil's own
parser, which accepts and reinterprets what the RFC forbids. dateutil only expands, and
every period it scans is charged to the expansion's budget (:mod:`pgsched.schedule.budget`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo

from dateutil import rrule as du_rrule

from pgsched.schedule import budget, rfc5545
from pgsched.schedule.errors import ScheduleError

_EXAMPLE = "FREQ=DAILY;BYHOUR=8;BYMINUTE=30"
_INTERVAL_FREQS = {"HOURLY", "MINUTELY", "SECONDLY"}
_FREQ_CODES = {name: getattr(du_rrule, name) for name in rfc5545.FREQUENCIES}
_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*)((?:;[^:;]*)*):(.*)$")
_DATE = re.compile(r"^\d{8}$", re.ASCII)
_DATE_TIME = re.compile(r"^\d{8}T\d{6}$", re.ASCII)
_MAX_DATES = 1000
_FIRST_YEAR = 1900
# dateutil's inner-loop iterations per budget step (a step is about a microsecond).
_LOOPS_PER_STEP = 32
# At most this many candidate times per FREQ period: dateutil produces a whole period's
# candidates even when only the last of them is wanted.
MAX_PER_PERIOD = 10_000
_PERIOD_DAYS = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7, "DAILY": 1}


@dataclass(frozen=True)
class _Member:
    """One RRULE line: the dateutil rule (DTSTART and explicit BY-parts) and its parts."""

    rule: du_rrule.rrule
    parts: rfc5545.RuleParts
    until: datetime | None  # UNTIL, or the COUNT-th occurrence: where the rule ends
    step_cost: int  # budget steps per period dateutil scans (its inner loops, at worst)


@dataclass(frozen=True)
class RecurrenceRule:
    text: str
    members: tuple[_Member, ...]
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]
    is_interval: bool

    def wall_times(self, start: datetime, spend: budget.Budget) -> Iterator[datetime]:
        """Every occurrence's naive wall-clock time >= ``start``, in increasing order.

        dateutil's loops have no limit of their own (a rule with no further occurrence
        makes it search until the year 9999), so every period it looks at is charged to
        ``spend`` (see :class:`_MeteredIterinfo`).
        """
        rules = self._from(start, spend)
        try:
            for wall in rules.xafter(start, inc=True):
                spend.spend()
                yield wall
        except ScheduleError:
            raise
        except (ValueError, IndexError) as error:  # "Invalid combination ... empty rule"
            raise ScheduleError(
                f"{self.text!r} never produces an occurrence ({error})", example=_EXAMPLE
            ) from None

    def _from(self, start: datetime, spend: budget.Budget) -> du_rrule.rruleset:
        """The rule set, each rule re-anchored near ``start`` and metered by ``spend``.

        dateutil expands a rule from its DTSTART on every call, so the cost of the next
        occurrence grows with the rule's age (a year-old minutely rule: ~0.1 s per
        materialization). Moving DTSTART forward by whole periods (FREQ x INTERVAL) to the
        start of the period containing ``start`` yields the same occurrences from
        ``start`` on, in constant time.
        """
        fresh = du_rrule.rruleset()
        for member in self.members:
            if member.until is not None and member.until < start:
                continue  # ended: dateutil would still search for a candidate past UNTIL
            rule = member.rule.replace(dtstart=_reanchored(member, start), until=member.until)
            rule._pgsched_meter = functools.partial(spend.spend, member.step_cost)  # type: ignore[attr-defined]
            fresh.rrule(rule)
        for value in self.rdates:
            if value >= start:
                fresh.rdate(value)
        for value in self.exdates:
            fresh.exdate(value)
        return fresh


class _MeteredIterinfo(du_rrule._iterinfo):
    """dateutil's per-period bookkeeping, which charges a rule's meter once per period.

    dateutil asks it for the days of each period (year, month, week or day) it scans, so
    this is the one place where every rule's search can be bounded without copying
    dateutil's expansion loop. Rules without a meter (anyone else's in this process)
    behave exactly as with dateutil's own class.
    """

    def __init__(self, rule: du_rrule.rrule) -> None:
        super().__init__(rule)
        meter = getattr(rule, "_pgsched_meter", None)
        if meter is not None:  # instance attributes shadow the methods _iter looks up
            for name in ("ydayset", "mdayset", "wdayset", "ddayset"):
                setattr(self, name, _metered(getattr(self, name), meter))


def _metered(method: Callable[..., Any], meter: Callable[[], None]) -> Callable[..., Any]:
    def charged(*args: Any) -> Any:
        meter()
        return method(*args)

    return charged


setattr(du_rrule, "_iterinfo", _MeteredIterinfo)  # noqa: B010 — replacing dateutil's class


def _reanchored(member: _Member, position: datetime) -> datetime:
    """A DTSTART at or before ``position`` that yields the same occurrences from ``position``
    on: the start of the FREQ x INTERVAL period containing ``position``.

    Sound because every BY-part dateutil would derive from DTSTART is given explicitly
    (:func:`_rule`), periods are counted from the original DTSTART, and a period begins
    where dateutil begins one (a week at WKST, a month on its 1st, a year on January 1st),
    so BYSETPOS sees whole periods. (COUNT was turned into an UNTIL by :func:`parse`.)
    """
    parts = member.parts
    dtstart: datetime = getattr(member.rule, "_dtstart")  # noqa: B009 — stable since dateutil 2.0
    if position <= dtstart:
        return dtstart
    interval = parts.interval
    if parts.freq in ("DAILY", "HOURLY", "MINUTELY", "SECONDLY"):
        unit = {"DAILY": 86400, "HOURLY": 3600, "MINUTELY": 60, "SECONDLY": 1}[parts.freq]
        period = timedelta(seconds=unit * interval)
        moved = dtstart + period * ((position - dtstart) // period)
    elif parts.freq == "WEEKLY":
        origin = datetime.combine(
            dtstart.date() - timedelta(days=(dtstart.weekday() - parts.wkst) % 7),
            datetime.min.time(),
        )
        weeks = (position - origin).days // 7 // interval * interval
        moved = origin + timedelta(weeks=weeks)
    elif parts.freq == "MONTHLY":
        months = (position.year - dtstart.year) * 12 + position.month - dtstart.month
        index = dtstart.year * 12 + dtstart.month - 1 + months // interval * interval
        moved = datetime(index // 12, index % 12 + 1, 1)
    else:
        years = (position.year - dtstart.year) // interval * interval
        moved = datetime(dtstart.year + years, 1, 1)
    return moved if moved > dtstart else dtstart


def parse(text: str, *, zone_name: str, anchor: datetime) -> RecurrenceRule:
    """Parse RRULE text; ``anchor`` (naive local) is DTSTART when the text has none."""
    zone = ZoneInfo(zone_name)
    dtstart: datetime | None = None
    dtstart_is_date = False
    rules: list[str] = []
    rdates: list[datetime] = []
    exdates: list[datetime] = []
    for line in _split_lines(text):
        name, params, value = _content_line(line)
        if name == "RRULE":
            rules.append(value)
            continue
        is_date = _params(line, params, zone_name=zone_name, periods=name == "RDATE")
        if name == "DTSTART":
            if dtstart is not None:
                raise ScheduleError("DTSTART is given twice", example="DTSTART:20270105T083000")
            dtstart = _moment(value, line=line, is_date=is_date, zone_name=zone_name)
            dtstart_is_date = is_date or bool(_DATE.match(value))
        else:
            found = rdates if name == "RDATE" else exdates
            for item in value.split(","):
                found.append(_moment(item.strip(), line=line, is_date=is_date, zone_name=zone_name))
            if len(rdates) + len(exdates) > _MAX_DATES:
                raise ScheduleError(
                    f"more than {_MAX_DATES} RDATE and EXDATE values; use an RRULE",
                    example=_EXAMPLE,
                )
    if not rules:
        raise ScheduleError(f"{text!r} has no RRULE part", example=_EXAMPLE)
    start = dtstart or anchor.replace(hour=0, minute=0, second=0, microsecond=0)
    members = tuple(
        _member(rfc5545.parse_rule(value, zone=zone, dtstart_is_date=dtstart_is_date), start)
        for value in rules
    )
    parsed = RecurrenceRule(
        text=text.strip(),
        members=members,
        rdates=tuple(sorted(set(rdates))),
        exdates=frozenset(exdates),
        is_interval=any(member.parts.freq in _INTERVAL_FREQS for member in members),
    )
    try:
        first = next(parsed.wall_times(start, budget.Budget(text.strip())), None)
    except ScheduleError:
        first = None  # dateutil searched until the budget ran out, typically to year 9999
    if first is None:
        # Without a DTSTART the search starts at the anchor's day, so a rule whose first
        # occurrence depends on it (an INTERVAL's phase, a rare date) may pass another day.
        counted = (
            ""
            if dtstart is not None
            else f"; with no DTSTART, DTSTART is midnight of the day it is applied"
            f" ({start:%Y-%m-%d}), so on another day the verdict may differ: give a DTSTART"
        )
        raise ScheduleError(
            f"{text!r} never produces an occurrence (its parts contradict each other, or"
            f" the first one is beyond {budget.MAX_STEPS} candidate times from DTSTART{counted})",
            example=_EXAMPLE,
        )
    return parsed


def _split_lines(text: str) -> list[str]:
    lines = [line.strip() for line in text.strip().replace("\\n", "\n").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise ScheduleError("the RRULE is empty", example=_EXAMPLE)
    return lines


def _content_line(line: str) -> tuple[str, str, str]:
    """``NAME;PARAM=..:VALUE`` → (NAME, params, VALUE); a bare rule is an RRULE value."""
    match = _LINE.match(line)
    if match is None:
        if ":" in line:
            raise ScheduleError(
                f"{line!r} is not a DTSTART, RRULE, RDATE or EXDATE line", example=_EXAMPLE
            )
        return "RRULE", "", line
    name = match.group(1).upper()
    if name == "EXRULE":
        raise ScheduleError(
            "EXRULE is not part of RFC 5545 (it was removed from RFC 2445); use EXDATE",
            example="RRULE:FREQ=DAILY\\nEXDATE:20271225T000000",
        )
    if name not in ("DTSTART", "RRULE", "RDATE", "EXDATE"):
        raise ScheduleError(
            f"{name} is not a property pgsched reads; use DTSTART, RRULE, RDATE or EXDATE",
            example=f"DTSTART:20270105T083000\\nRRULE:{_EXAMPLE}",
        )
    if name == "RRULE" and match.group(2):
        raise ScheduleError(f"{line!r}: RRULE takes no parameters", example=f"RRULE:{_EXAMPLE}")
    return name, match.group(2), match.group(3).strip()


def _params(line: str, params: str, *, zone_name: str, periods: bool) -> bool:
    """Check TZID and VALUE parameters; True if the values are dates (VALUE=DATE)."""
    is_date = False
    for param in filter(None, params.split(";")):
        key, _, value = param.partition("=")
        key = key.strip().upper()
        if key == "TZID":
            if value != zone_name:
                raise ScheduleError(
                    f"{line!r} uses TZID={value} but the definition's timeZone is {zone_name};"
                    " times in the rule are local to timeZone",
                    example=f"DTSTART;TZID={zone_name}:20260105T083000",
                )
        elif key == "VALUE" and value.upper() in ("DATE", "DATE-TIME"):
            is_date = value.upper() == "DATE"
        elif key == "VALUE" and value.upper() == "PERIOD" and periods:
            raise ScheduleError(
                f"{line!r}: RDATE periods are not supported; give start times",
                example="RDATE:20271224T180000",
            )
        else:
            raise ScheduleError(
                f"{line!r}: parameter {param!r} is not supported; use TZID={zone_name}"
                " or VALUE=DATE",
                example=f"EXDATE;TZID={zone_name}:20271225T083000",
            )
    return is_date


def _moment(value: str, *, line: str, is_date: bool, zone_name: str) -> datetime:
    if value.upper().endswith("Z") and _DATE_TIME.match(value[:-1]):
        raise ScheduleError(
            f"{line!r} gives a UTC time (trailing Z); write local times of timeZone {zone_name}",
            example="DTSTART:20260105T083000",
        )
    parsed: datetime | None = None
    if _DATE.match(value) or (not is_date and _DATE_TIME.match(value)):
        try:
            parsed = datetime.strptime(value, "%Y%m%d" if len(value) == 8 else "%Y%m%dT%H%M%S")
        except ValueError:
            parsed = None
    if parsed is None:
        layout = "a date like 20260105" if is_date else "a date-time like 20260105T083000"
        raise ScheduleError(
            f"{line!r}: {value!r} is not {layout}",
            example=f"DTSTART;TZID={zone_name}:20260105T083000",
        )
    if not _FIRST_YEAR <= parsed.year < budget.LAST_WALL.year:
        raise ScheduleError(
            f"{line!r}: year {parsed.year} is outside {_FIRST_YEAR}..{budget.LAST_WALL.year - 1}",
            example="DTSTART:20270105T083000",
        )
    return parsed


def _member(parts: rfc5545.RuleParts, dtstart: datetime) -> _Member:
    """The dateutil rule of ``parts``, with every BY-part dateutil would take from DTSTART
    given explicitly (what re-anchoring relies on), and its worst cost per day.

    A COUNT becomes the UNTIL of its last occurrence, found once here (within one budget):
    a rule with an UNTIL can be re-anchored and is known to have ended, a counted one
    would have to be expanded from DTSTART every time.
    """
    if parts.count is not None:
        uncounted = _member(dataclasses.replace(parts, count=None), dtstart)
        alone = RecurrenceRule(
            text="", members=(uncounted,), rdates=(), exdates=frozenset(), is_interval=False
        )
        spend = budget.Budget(f"COUNT={parts.count}")
        found = list(islice(alone.wall_times(dtstart, spend), parts.count))
        last = found[-1] if found else dtstart - timedelta(seconds=1)
        return dataclasses.replace(uncounted, until=last)
    bymonth = parts.bymonth
    bymonthday = parts.bymonthday
    byday: tuple[tuple[int | None, int], ...] = parts.byday
    if not (parts.byweekno or parts.byyearday or bymonthday or byday):
        if parts.freq == "YEARLY":
            bymonth = bymonth or (dtstart.month,)
            bymonthday = (dtstart.day,)
        elif parts.freq == "MONTHLY":
            bymonthday = (dtstart.day,)
        elif parts.freq == "WEEKLY":
            byday = ((None, dtstart.weekday()),)
    coarse = parts.freq in _PERIOD_DAYS
    byhour = parts.byhour or ((dtstart.hour,) if coarse else ())
    byminute = parts.byminute or (
        (dtstart.minute,) if parts.freq != "MINUTELY" and parts.freq != "SECONDLY" else ()
    )
    bysecond = parts.bysecond or ((dtstart.second,) if parts.freq != "SECONDLY" else ())
    _check_period_size(
        parts, bymonth, bymonthday, byday, len(byhour) * len(byminute) * len(bysecond)
    )
    try:
        rule = du_rrule.rrule(
            _FREQ_CODES[parts.freq],
            dtstart=dtstart,
            interval=parts.interval,
            wkst=parts.wkst,
            until=parts.until,
            bysetpos=parts.bysetpos or None,
            bymonth=bymonth or None,
            bymonthday=bymonthday or None,
            byyearday=parts.byyearday or None,
            byweekno=parts.byweekno or None,
            byweekday=[du_rrule.weekday(day, ordinal) for ordinal, day in byday] or None,
            byhour=byhour or None,
            byminute=byminute or None,
            bysecond=bysecond or None,
            cache=False,
        )
    except ValueError as error:  # "Invalid rrule byxxx generates an empty set."
        # e.g. FREQ=MINUTELY;INTERVAL=2;BYMINUTE=0 from a DTSTART at minute 1: every second
        # minute from :01 is odd, so no occurrence can ever fall on :00.
        raise ScheduleError(
            f"FREQ={parts.freq};INTERVAL={parts.interval} counted from DTSTART"
            f" {dtstart:%Y%m%dT%H%M%S} never lands on its BYHOUR/BYMINUTE/BYSECOND values, so"
            f" the rule never produces an occurrence ({error}); start DTSTART on one of them"
            " or use an INTERVAL that divides 24 (hours) or 60 (minutes, seconds) evenly",
            example=_EXAMPLE,
        ) from None
    return _Member(rule=rule, parts=parts, until=parts.until, step_cost=_step_cost(parts))


def _check_period_size(
    parts: rfc5545.RuleParts,
    bymonth: tuple[int, ...],
    bymonthday: tuple[int, ...],
    byday: tuple[tuple[int | None, int], ...],
    times: int,
) -> None:
    if parts.freq not in _PERIOD_DAYS:
        return
    months = len(bymonth) or (12 if parts.freq == "YEARLY" else 1)
    days = _PERIOD_DAYS[parts.freq]
    if parts.byyearday:
        days = min(days, len(parts.byyearday))
    if bymonthday:
        days = min(days, len(bymonthday) * months)
    if byday and all(ordinal is not None for ordinal, _ in byday):
        days = min(days, len(byday) * months)
    if days * times > MAX_PER_PERIOD:
        finer = rfc5545.FREQUENCIES[rfc5545.FREQUENCIES.index(parts.freq) + 1]
        raise ScheduleError(
            f"FREQ={parts.freq} with these BY-parts has up to {days * times} occurrences in"
            f" each period, more than pgsched expands ({MAX_PER_PERIOD}); use a finer FREQ",
            example=f"FREQ={finer}",
        )


def _step_cost(parts: rfc5545.RuleParts) -> int:
    """Budget steps (about a microsecond each) for one period of dateutil's scan.

    A YEARLY period checks 366 days; to find the next time of day matching
    BYHOUR/BYMINUTE/BYSECOND, a SECONDLY or MINUTELY rule steps by INTERVAL up to a whole
    day's worth (86,400 or 1,440 iterations).
    """
    loops = _PERIOD_DAYS.get(parts.freq, 1)
    if parts.freq == "SECONDLY" and (parts.byhour or parts.byminute or parts.bysecond):
        loops = 86400 // math.gcd(parts.interval, 86400)
    elif parts.freq == "MINUTELY" and (parts.byhour or parts.byminute):
        loops = 1440 // math.gcd(parts.interval, 1440)
    return max(1, loops // _LOOPS_PER_STEP)
