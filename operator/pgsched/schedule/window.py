"""An active window: ``spec.activeFrom`` / ``spec.activeUntil`` bound any schedule.

Both are RFC 3339 instants with an offset, both inclusive, either may be left out: a cron
job that starts on the first of the month and stops at the end of a campaign, an RRULE
that should not begin before a launch, a ``runAt`` that must not run once a window has
closed. Outside the window a schedule simply has no occurrences — nothing is materialized,
nothing is recorded as skipped (there was no occurrence to skip) — and the status and
``pgsched next`` say which side of the window the job is on (:meth:`Window.note`).

The window wraps the one schedule every reader uses (``engine.definitions.build_schedule``),
so the materializer, ``status.nextRuns``, the UI, backfill and ``pgsched next`` agree by
construction. Unlike RRULE's DTSTART and UNTIL it is an instant, not a local time, and it
applies to every kind alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pgsched.schedule import budget
from pgsched.schedule.timeline import Occurrence, Stream, utc

FROM = "activeFrom"
UNTIL = "activeUntil"
EXAMPLE = "activeFrom: '2027-01-01T00:00:00Z'"
_JUST_BEFORE = timedelta(microseconds=1)
State = Literal["NotYetActive", "Active", "ActiveWindowEnded"]


@dataclass(frozen=True)
class Window:
    start: datetime | None  # inclusive, UTC
    end: datetime | None  # inclusive, UTC

    def state(self, now: datetime, *, more: bool) -> State:
        """Which side of the window ``now`` is on. ``more``: whether the schedule has an
        occurrence ahead (within the window): without one, the window is over for it."""
        if self.end is not None and (now > self.end or not more):
            return "ActiveWindowEnded"
        if self.start is not None and now < self.start:
            return "NotYetActive"
        return "Active"

    def note(self, now: datetime, *, more: bool) -> str | None:
        """:meth:`state` for a person; None inside the window."""
        state = self.state(now, more=more)
        if state == "ActiveWindowEnded":
            assert self.end is not None
            if now > self.end:
                return f"ended at {_shown(self.end)} (spec.activeUntil): no more runs"
            return f"has no occurrence before activeUntil {_shown(self.end)}: no more runs"
        if state == "NotYetActive":
            assert self.start is not None
            return f"not active until {_shown(self.start)} (spec.activeFrom)"
        return None


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant with an offset (kept as written); ValueError saying what is
    wrong, the text quoted as JSON and cut at 80 characters (it may reach an Event). Also
    the ``pgsched.dev/backfill`` range's parser (``k8s/scheduledjobs/commands.py``)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{_quoted(text)} is not an RFC 3339 instant") from None
    if moment.tzinfo is None:
        raise ValueError(f"{_quoted(text)} has no offset (add Z for UTC)")
    return moment


def _quoted(text: str) -> str:
    return json.dumps(text if len(text) <= 80 else text[:80] + "…", ensure_ascii=False)


def of(spec: Mapping[str, Any]) -> Window | None:
    """The window a stored (validated) spec declares, None without one."""
    start, end = spec.get(FROM), spec.get(UNTIL)
    if start is None and end is None:
        return None
    return Window(
        utc(parse_instant(start)) if start is not None else None,
        utc(parse_instant(end)) if end is not None else None,
    )


@dataclass(frozen=True)
class Windowed(Stream):
    """A schedule (a single one or a union) with its occurrences outside ``window`` left
    out: the outermost layer, so the window bounds every entry of a union alike."""

    inner: Stream
    window: Window

    def occurrences_after(
        self, after: datetime, *, limit: int = budget.MAX_STEPS
    ) -> Iterator[Occurrence]:
        if self.window.start is not None:
            after = max(after, self.window.start - _JUST_BEFORE)
        for occurrence in self.inner.occurrences_after(after, limit=limit):
            if self.window.end is not None and occurrence.at > self.window.end:
                return
            yield occurrence

    def resume_after(self, excluded: Occurrence) -> datetime | None:
        return self.inner.resume_after(excluded)


def bound(schedule: Stream, window: Window | None) -> Stream:
    if window is None:
        return schedule
    return Windowed(schedule, window)


def unbounded(schedule: Stream) -> Stream:
    """The schedule inside its window, if it has one."""
    return schedule.inner if isinstance(schedule, Windowed) else schedule


def _shown(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
