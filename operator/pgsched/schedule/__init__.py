"""Pure recurrence arithmetic: cron, RRULE and one-shot schedules in IANA time zones.

Nothing here touches the database or reads the clock; callers pass "now" in. Build a
:class:`~pgsched.schedule.timeline.Schedule` with :func:`build` and ask it for occurrences.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from pgsched.schedule import cron, never, once, zones
from pgsched.schedule.errors import ScheduleError
from pgsched.schedule.timeline import Occurrence, Recurrence, Schedule, Stream
from pgsched.schedule.union import Union

ScheduleKind = Literal["cron", "rrule", "once", "none", "union"]

__all__ = ["Occurrence", "Schedule", "ScheduleError", "ScheduleKind", "Stream", "build"]


def build(
    kind: ScheduleKind,
    text: str,
    *,
    zone: str,
    dst: zones.DstPolicy | None = None,
    hash_seed: str = "",
    anchor: datetime,
) -> Stream:
    """Parse a schedule.

    ``hash_seed`` feeds cron's ``H`` field (the definition's ``namespace/name``);
    ``anchor`` (an aware instant, normally the definition's creation time) is the RRULE's
    DTSTART day when the text gives none. A ``union`` is the JSON text of
    :func:`union_text`; its entries without a ``timeZone`` take ``zone``.
    """
    if kind == "union":
        return Union(
            tuple(
                _single(
                    entry["kind"],
                    entry["text"],
                    zone=entry.get("timeZone", zone),
                    dst=dst,
                    hash_seed=hash_seed,
                    anchor=anchor,
                )
                for entry in json.loads(text)
            )
        )
    return _single(kind, text, zone=zone, dst=dst, hash_seed=hash_seed, anchor=anchor)


def union_text(entries: list[tuple[ScheduleKind, str, str | None]]) -> str:
    """The stored text of a union of (kind, text, time zone or None) entries."""
    return json.dumps(
        [
            {"kind": kind, "text": text, **({"timeZone": zone} if zone else {})}
            for kind, text, zone in entries
        ],
        separators=(",", ":"),
    )


def _single(
    kind: ScheduleKind,
    text: str,
    *,
    zone: str,
    dst: zones.DstPolicy | None,
    hash_seed: str,
    anchor: datetime,
) -> Schedule:
    tz = zones.load_zone(zone)
    recurrence: Recurrence
    if kind == "cron":
        recurrence = cron.parse(text, hash_seed=hash_seed)
    elif kind == "rrule":
        # Imported here: it loads dateutil, which cron and one-shot schedules never need.
        from pgsched.schedule import rrule

        recurrence = rrule.parse(text, zone_name=zone, anchor=zones.to_wall(anchor, tz))
    elif kind == "once":
        recurrence = once.parse(text)
    else:
        recurrence = never.Never()
    return Schedule(recurrence=recurrence, zone=tz, dst=dst or zones.DstPolicy())
