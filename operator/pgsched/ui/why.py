""" "Why didn't it run at ...?": a local time, the occurrence nearest it, and its fate.

The answer is one of:

- ``ran`` / ``skipped`` / ``failed`` / ... : the schedule has an occurrence in that minute
  and the database has its run (and retries): the last attempt's status and reason;
- ``not-recorded``: the schedule has an occurrence there but no run row exists — before
  the ScheduledJob existed, not come yet, or missed while no operator ticked (catchUp);
- ``excluded``: an EXDATE of the rule names that minute, so it has no occurrence there;
- ``never-scheduled``: the schedule has no occurrence in that minute; the nearest ones
  before and after are given, with their fates.

A fate says what holds a run still QUEUED (``engine.waits``: the pool, the cap, ...), and
for an occurrence to come, what will hold it: a suspension (it will be SKIPPED/Suspended)
or a ConcurrencyPool that does not exist (its run will wait). A minute in a DST gap is
``dst-skipped`` under ``dstPolicy.gap: skip``; the page says separately when the local
time typed does not exist or happens twice.

The occurrences come from ``engine.definitions.schedule_of`` — the materializer's own —
under the spec in force now (an older spec may have had other occurrences: said so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pgsched import wording
from pgsched.engine import definitions, waits
from pgsched.engine.models import Definition, Run
from pgsched.schedule import Schedule, Stream, rrule, zones
from pgsched.schedule import window as windows
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
    verdict: str  # the fate's verdict when the minute matches, else "excluded" or "never-scheduled"
    matched: Fate | None
    before: Fate | None
    after: Fate | None
    excluded_by: datetime | None = None  # the EXDATE (local wall time) naming the minute


RunsAt = Callable[[Sequence[datetime]], list[Run]]
WaitsOf = Callable[[Sequence[int]], dict[int, waits.Wait]]


@dataclass(frozen=True)
class Now:
    """What holds at the moment of asking: the clock, the waits of queued runs, whether
    the ConcurrencyPool the job names exists, and the Calendars it excludes (a future
    occurrence on their days is said to be excluded, naming the calendar)."""

    at: datetime
    waits_of: WaitsOf
    pool_found: bool = True
    calendars: Calendars = NO_CALENDARS


def explain(definition: Definition, asked: datetime, *, runs_at: RunsAt, now: Now) -> Answer:
    """What happened at ``asked``; ``runs_at`` fetches the runs of occurrence instants."""
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
    queued = [run.id for run in runs if run.status == "QUEUED"]
    held = now.waits_of(queued) if queued else {}

    def fate(at: datetime | None) -> Fate | None:
        if at is None:
            return None
        found = tuple(by_instant.get(at, ()))
        return _fate(definition, schedule, at, found, held=held, now=now)

    matched = fate(matched_at)
    excluded_by = None if matched else _exdate_in(schedule, minute_start)
    return Answer(
        asked=asked,
        verdict=matched.verdict if matched else "excluded" if excluded_by else "never-scheduled",
        matched=matched,
        before=fate(before) if matched is None else None,
        after=fate(after) if matched is None else None,
        excluded_by=excluded_by,
    )


def _exdate_in(schedule: Stream, minute_start: datetime) -> datetime | None:
    """The rule's EXDATE (a local wall time) within the minute starting at ``minute_start``."""
    schedule = windows.unbounded(schedule)
    if not isinstance(schedule, Schedule) or not isinstance(
        schedule.recurrence, rrule.RecurrenceRule
    ):
        return None
    wall = zones.to_wall(minute_start, schedule.zone)
    return next(
        (item for item in sorted(schedule.recurrence.exdates) if wall <= item < wall + MINUTE),
        None,
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
    held: dict[int, waits.Wait],
    now: Now,
) -> Fate:
    if runs:
        last = runs[-1]
        retried = f" after {len(runs)} attempts" if len(runs) > 1 else ""
        note = f"{last.status}{f'/{last.reason}' if last.reason else ''}{retried}"
        if last.id in held:
            note += f", waiting for {held[last.id].message}"
        elif last.error:
            note += f": {last.error}"
        return Fate(at, last.status.lower(), runs, note)
    gap = schedule.next_after(at - _TINY)
    if gap is not None and gap.at == at and gap.skipped:
        return Fate(
            at, "dst-skipped", runs, "in a DST gap under dstPolicy.gap: skip (SKIPPED/DSTGap)"
        )
    excluded_by = now.calendars.excluding(gap) if gap is not None and gap.at == at else None
    if at > now.at:
        note = f"has not come yet (in {wording.seconds((at - now.at).total_seconds())})"
        if excluded_by is not None:
            note += (
                f"; Calendar {excluded_by} excludes its day, so it will be recorded"
                " SKIPPED/CalendarExcluded"
            )
        elif definition.is_suspended:
            why = definition.auto_suspend_reason or "spec.suspend is true"
            note += f"; the ScheduledJob is suspended ({why}): it will be SKIPPED/Suspended"
        pool = definition.spec.get("pool")
        if isinstance(pool, str) and not now.pool_found:
            note += (
                f"; ConcurrencyPool {pool} does not exist in namespace {definition.namespace}:"
                " its run will wait in the queue until it does"
            )
    elif at < definition.created_at:
        note = "before this ScheduledJob existed"
    else:
        note = (
            "no run was recorded: it was missed while no operator ticked and catchUp"
            f" ({definition.catch_up}) dropped it, or the spec then in force had no such occurrence"
        )
    return Fate(at, "not-recorded", runs, note)
