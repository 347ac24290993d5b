""" "Why didn't it run at ...?": a local time, the occurrence nearest it, and its fate.

The answer is one of:

- ``ran`` / ``skipped`` / ``failed`` / ... : the schedule has an occurrence in that minute
  and the database has its run (and retries): the last attempt's status and reason;
- ``not-recorded``: the schedule has an occurrence there but no run row exists — before
  the ScheduledJob existed, not come yet, or missed while no operator ticked (catchUp);
- ``never-scheduled``: the schedule has no occurrence in that minute; the nearest ones
  before and after are given, with their fates.

The occurrences come from ``engine.definitions.schedule_of`` — the materializer's own —
under the spec in force now (an older spec may have had other occurrences: said so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pgsched.engine import definitions
from pgsched.engine.models import Definition, Run
from pgsched.schedule import Stream
from pgsched.schedule.calendars import NO_CALENDARS, Calendars

MINUTE = timedelta(minutes=1)
# Look this far back for the previous occurrence, widening step by step (a yearly
# schedule's previous occurrence is up to a year away; a minutely one's a minute).
_LOOKBACK = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=8),
    timedelta(days=32),
    timedelta(days=370),
    timedelta(days=3 * 366),
)


@dataclass(frozen=True)
class Fate:
    at: datetime  # the occurrence instant (UTC)
    verdict: str  # a run status in lower case, "not-recorded" or "dst-skipped"
    runs: tuple[Run, ...]  # the attempts, first to last
    note: str


@dataclass(frozen=True)
class Answer:
    asked: datetime  # the instant asked about (UTC)
    verdict: str  # the fate's verdict when the minute matches, else "never-scheduled"
    matched: Fate | None
    before: Fate | None
    after: Fate | None


RunsAt = Callable[[Sequence[datetime]], list[Run]]


def explain(
    definition: Definition,
    asked: datetime,
    *,
    runs_at: RunsAt,
    now: datetime,
    calendars: Calendars = NO_CALENDARS,
) -> Answer:
    """What happened at ``asked``; ``runs_at`` fetches the runs of occurrence instants;
    ``calendars``: those the job excludes (a future occurrence on their days is said to
    be excluded, naming the calendar)."""
    schedule = definitions.schedule_of(definition)
    minute_start = asked.replace(second=0, microsecond=0)
    matched_at = _first_in(schedule, minute_start, minute_start + MINUTE)
    before = _previous(schedule, minute_start)
    after = next(
        (item.at for item in schedule.occurrences_after(minute_start + MINUTE - _TINY)), None
    )
    instants = [item for item in (matched_at, before, after) if item is not None]
    runs = runs_at(instants) if instants else []
    by_instant: dict[datetime, list[Run]] = {}
    for run in runs:
        by_instant.setdefault(run.scheduled_for, []).append(run)

    def fate(at: datetime | None) -> Fate | None:
        if at is None:
            return None
        runs_of = tuple(by_instant.get(at, ()))
        return _fate(definition, schedule, at, runs_of, now=now, calendars=calendars)

    matched = fate(matched_at)
    return Answer(
        asked=asked,
        verdict=matched.verdict if matched else "never-scheduled",
        matched=matched,
        before=fate(before) if matched is None else None,
        after=fate(after) if matched is None else None,
    )


_TINY = timedelta(microseconds=1)


def _first_in(schedule: Stream, start: datetime, end: datetime) -> datetime | None:
    found = schedule.next_after(start - _TINY)
    return found.at if found is not None and found.at < end else None


def _previous(schedule: Stream, before: datetime) -> datetime | None:
    for span in _LOOKBACK:
        last = None
        for item in schedule.occurrences_after(before - span):
            if item.at >= before:
                break
            last = item.at
        if last is not None:
            return last
    return None


def _fate(
    definition: Definition,
    schedule: Stream,
    at: datetime,
    runs: tuple[Run, ...],
    *,
    now: datetime,
    calendars: Calendars,
) -> Fate:
    if runs:
        last = runs[-1]
        retried = f" after {len(runs)} attempts" if len(runs) > 1 else ""
        note = f"{last.status}{f'/{last.reason}' if last.reason else ''}{retried}"
        if last.error:
            note += f": {last.error}"
        return Fate(at, last.status.lower(), runs, note)
    gap = schedule.next_after(at - _TINY)
    if gap is not None and gap.at == at and gap.skipped:
        return Fate(
            at, "dst-skipped", runs, "in a DST gap under dstPolicy.gap: skip (SKIPPED/DSTGap)"
        )
    excluded_by = calendars.excluding(gap) if gap is not None and gap.at == at else None
    if at > now and excluded_by is not None:
        note = (
            f"has not come yet; Calendar {excluded_by} excludes its day, so it will be"
            " recorded SKIPPED/CalendarExcluded"
        )
    elif at > now:
        note = "has not come yet"
    elif at < definition.created_at:
        note = "before this ScheduledJob existed"
    else:
        note = (
            "no run was recorded: it was missed while no operator ticked and catchUp"
            f" ({definition.catch_up}) dropped it, or the spec then in force had no such occurrence"
        )
    return Fate(at, "not-recorded", runs, note)
