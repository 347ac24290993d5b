"""A schedule in plain words: "weekdays at 08:30 Europe/Sofia".

Only the shapes people write most often are put into words; anything else (hash fields,
steps inside ranges, several hours with several minutes, BYSETPOS, ...) is shown as the
expression itself, which is always right. Nothing here is used for scheduling.
"""

from __future__ import annotations

import json
import re

from pgsched.schedule import cron

_DAY_NAMES = ["Sundays", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays"]
_CRON_DAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
_RRULE_DAYS = {"SU": 0, "MO": 1, "TU": 2, "WE": 3, "TH": 4, "FR": 5, "SA": 6}
_NUMBER = re.compile(r"^\d{1,2}$")
_STEP = re.compile(r"^\*/(\d{1,2})$")


def describe(kind: str, text: str, zone: str) -> str:
    """The schedule in words with its zone, or the expression with its zone."""
    if kind == "none":
        return "only after its upstreams (spec.after)"  # no schedule, so no zone either
    if kind == "union":  # spec.schedules: each entry in its own zone
        return " and ".join(
            describe(entry["kind"], entry["text"], entry.get("timeZone", zone))
            for entry in json.loads(text)
        )
    words = _words(kind, text.strip())
    return f"{words or text} {zone}"


def _words(kind: str, text: str) -> str | None:
    if kind == "cron":
        return _cron(cron.MACROS.get(text.lower(), text))
    if kind == "rrule":
        return _rrule(text)
    if kind == "once":
        return f"once at {text.replace('T', ' ')}"
    return None


def _cron(text: str) -> str | None:
    fields = text.split()
    if len(fields) != 5:
        return None
    minute, hour, day, month, weekday = fields
    if month != "*":
        return None
    if day == "*" and weekday == "*":
        every = _interval(minute, hour)
        if every:
            return every
    if not (_NUMBER.match(minute) and _NUMBER.match(hour)):
        return None
    at = f"at {int(hour):02d}:{int(minute):02d}"
    if day == "*":
        days = "daily" if weekday == "*" else _cron_days(weekday)
        return f"{days} {at}" if days else None
    if weekday == "*" and _NUMBER.match(day):
        return f"monthly on day {int(day)} {at}"
    return None


def _interval(minute: str, hour: str) -> str | None:
    if minute == "*" and hour == "*":
        return "every minute"
    step = _STEP.match(minute)
    if step and hour == "*":
        return f"every {int(step.group(1))} minutes"
    if _NUMBER.match(minute):
        if hour == "*":
            return f"hourly at :{int(minute):02d}"
        step = _STEP.match(hour)
        if step:
            return f"every {int(step.group(1))} hours at :{int(minute):02d}"
    return None


def _cron_days(field: str) -> str | None:
    days: set[int] = set()
    for part in field.upper().split(","):
        low, _, high = part.partition("-")
        try:
            first = _cron_day(low)
            last = _cron_day(high) if high else first
        except ValueError:
            return None
        if last < first:
            return None
        days.update(range(first, last + 1))
    return _day_set({day % 7 for day in days})


def _cron_day(text: str) -> int:
    if text in _CRON_DAYS:
        return _CRON_DAYS[text]
    if _NUMBER.match(text) and int(text) <= 7:
        return int(text)
    raise ValueError(text)


def _day_set(days: set[int]) -> str:
    if days == set(range(7)):
        return "daily"
    if days == {1, 2, 3, 4, 5}:
        return "weekdays"
    if days == {0, 6}:
        return "weekends"
    return ", ".join(_DAY_NAMES[day] for day in sorted(days, key=lambda d: (d + 6) % 7))


def _rrule(text: str) -> str | None:
    parts: dict[str, str] = {}
    for item in text.upper().removeprefix("RRULE:").split(";"):
        key, _, value = item.partition("=")
        parts[key.strip()] = value.strip()
    freq = parts.pop("FREQ", "")
    interval = parts.pop("INTERVAL", "1")
    hours, minutes = parts.pop("BYHOUR", None), parts.pop("BYMINUTE", "0")
    parts.pop("BYSECOND", None)
    days = parts.pop("BYDAY", None)
    monthday = parts.pop("BYMONTHDAY", None)
    if parts or not interval.isdigit() or not minutes.isdigit():
        return None  # DTSTART, COUNT, UNTIL, BYSETPOS, ...: the expression says it best
    step = int(interval)
    if freq in ("MINUTELY", "HOURLY") and hours is None and days is None and monthday is None:
        unit = "minute" if freq == "MINUTELY" else "hour"
        if freq == "HOURLY":
            every = "hourly" if step == 1 else f"every {step} hours"
            return f"{every} at :{int(minutes):02d}"
        return "every minute" if step == 1 else f"every {step} {unit}s"
    if hours is None or not hours.isdigit():
        return None
    at = f"at {int(hours):02d}:{int(minutes):02d}"
    if freq == "DAILY" and days is None and monthday is None:
        return f"daily {at}" if step == 1 else f"every {step} days {at}"
    if freq == "WEEKLY" and days is not None and monthday is None and step == 1:
        try:
            chosen = {_RRULE_DAYS[day] for day in days.split(",")}
        except KeyError:
            return None
        return f"{_day_set(chosen)} {at}"
    if freq == "MONTHLY" and monthday is not None and monthday.isdigit() and days is None:
        every = "monthly" if step == 1 else f"every {step} months"
        return f"{every} on day {int(monthday)} {at}"
    return None
