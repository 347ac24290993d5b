"""Words every screen shares: counts with the right plural, lists of runs, instants.

Status, Events, ``pgsched describe``, the UI and the database's own messages (the SQL
functions ``pgsched.plural`` and ``pgsched.iso_utc`` in ``sql/functions/``, which say the
same) put numbers and times into sentences; doing it here, once, keeps "1 consecutive
failure" and "2026-12-03T06:28:20Z" the same on every screen instead of right in some.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo


def plural(count: int, singular: str, many: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``0 runs``; ``many`` for irregular words."""
    return f"{count} {singular if count == 1 else many or singular + 's'}"


def runs(ids: Sequence[int]) -> str:
    """``run 17``, ``runs 17, 18``; ``no run`` for none."""
    if not ids:
        return "no run"
    return f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(str(item) for item in ids)}"


def instant(moment: datetime) -> str:
    """ISO 8601 in UTC to the second: ``2026-12-03T06:28:20Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local(moment: datetime, zone: ZoneInfo) -> str:
    """``2026-06-01 08:00:00 EEST``: a time in a ScheduledJob's zone, as screens show it."""
    shown = moment.astimezone(zone)
    return shown.strftime("%Y-%m-%d %H:%M:%S ") + (shown.tzname() or "")


def seconds(span: float) -> str:
    """A span in whole seconds, minutes, hours or days, as a wait reads: ``40 s``,
    ``5 min``, ``3 h``, ``12 d`` (rounded down past a minute)."""
    whole = max(0, round(span))
    if whole < 120:
        return f"{whole} s"
    if whole < 2 * 3600:
        return f"{whole // 60} min"
    if whole < 2 * 86400:
        return f"{whole // 3600} h"
    return f"{whole // 86400} d"


def duration(span: timedelta) -> str:
    """How long a run took: ``850ms``, ``4.2s``, ``3m05s``, ``2h03m``, ``1d02h``."""
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
