"""The 2027 bank holidays of England and Wales, as an iCalendar file written here.

Tests build Calendars from it (never fetched): eight weekdays, two of them around the
UK's spring-forward night (Good Friday 26 March, Easter Monday 29 March; the clocks go
forward on 28 March) and two in the week after Christmas (substitute days).
"""

from __future__ import annotations

from datetime import date, timedelta

UK_2027 = {
    date(2027, 1, 1): "New Year's Day",
    date(2027, 3, 26): "Good Friday",
    date(2027, 3, 29): "Easter Monday",
    date(2027, 5, 3): "Early May bank holiday",
    date(2027, 5, 31): "Spring bank holiday",
    date(2027, 8, 30): "Summer bank holiday",
    date(2027, 12, 27): "Christmas Day (substitute day)",
    date(2027, 12, 28): "Boxing Day (substitute day)",
}


def uk_2027_ics() -> str:
    """An RFC 5545 file as feeds publish it: CRLF lines, all-day VEVENTs with an exclusive
    DTEND, a folded SUMMARY, a VTIMEZONE and a VALARM the reader must skip."""
    lines = [
        "BEGIN:VCALENDAR",
        "VERSION:2.0",
        "PRODID:-//pgsched tests//holidays//EN",
        "BEGIN:VTIMEZONE",
        "TZID:Europe/London",
        "BEGIN:STANDARD",
        "DTSTART:19701025T020000",
        "TZOFFSETFROM:+0100",
        "TZOFFSETTO:+0000",
        "END:STANDARD",
        "END:VTIMEZONE",
    ]
    for day, summary in UK_2027.items():
        lines += [
            "BEGIN:VEVENT",
            f"UID:{day:%Y%m%d}-uk@pgsched.test",
            "DTSTAMP:20261101T000000Z",
            f"DTSTART;VALUE=DATE:{day:%Y%m%d}",
            f"DTEND;VALUE=DATE:{day + timedelta(days=1):%Y%m%d}",
            # Folded as RFC 5545 folds long lines: CRLF then one space.
            f"SUMMARY:{summary[:10]}\r\n {summary[10:]}",
            "BEGIN:VALARM",
            "ACTION:DISPLAY",
            "TRIGGER:-PT15M",
            "END:VALARM",
            "END:VEVENT",
        ]
    lines.append("END:VCALENDAR")
    return "\r\n".join(lines) + "\r\n"


def weekdays(year: int) -> list[date]:
    day, found = date(year, 1, 1), []
    while day.year == year:
        if day.weekday() < 5:
            found.append(day)
        day += timedelta(days=1)
    return found
