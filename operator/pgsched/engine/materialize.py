"""Materialization: due definitions become run rows.

For each definition whose ``next_run_at`` has passed, the occurrences up to now become rows
and ``next_run_at`` advances past now in the same transaction. The advance is the
idempotency marker: a crash keeps both or neither, and the unique occurrence key turns a
repeat by a second leader into a no-op.

Every occurrence that will not run is still written, as ``SKIPPED`` with a reason
(``catchUp``, ``maxQueuedRuns``, excluding Calendars, suspension, a missed starting
deadline, a DST gap), so "why didn't it run at 09:00?" has an answer. A round
materializes at most one batch of each kind, definitions on time first, so a stampede's
first runs are claimed after one batch rather than after all of it.

The policies and the order of a round: docs/architecture.md, "Materializing occurrences".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from pgsched import wording
from pgsched.db import clock, queries
from pgsched.db.connection import Connection
from pgsched.engine import calendars, definitions, jitter
from pgsched.engine.models import Definition
from pgsched.schedule import Occurrence, Stream
from pgsched.schedule.calendars import NO_CALENDARS, Calendars

log = logging.getLogger(__name__)

# After a very long outage, record at most this many missed occurrences one by one.
MAX_RECORDED_MISSES = 1000
DEFAULT_LATE_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class NewRun:
    scheduled_for: datetime
    status: str  # QUEUED or SKIPPED
    reason: str | None = None
    error: str | None = None
    deadline_at: datetime | None = None
    not_before: datetime | None = None  # the jittered start, when later than scheduled_for


@dataclass(frozen=True)
class Plan:
    runs: list[NewRun]
    next_run_at: datetime | None
    last_scheduled_for: datetime | None


@dataclass
class MaterializeResult:
    definitions: int = 0
    queued: int = 0
    skipped: int = 0
    failed_definitions: list[str] = field(default_factory=list)
    # A batch was full: more may be due now (the tick goes again at once).
    more: bool = False
    # The "now" of the round's first batch: the next round's ``on_time_since``.
    at: datetime | None = None

    def add(self, other: MaterializeResult) -> None:
        self.definitions += other.definitions
        self.queued += other.queued
        self.skipped += other.skipped
        self.failed_definitions += other.failed_definitions
        self.more = self.more or other.more
        self.at = self.at or other.at


def run_once(
    conn: Connection,
    *,
    now: datetime | None = None,
    batch_size: int = 500,
    late_after: timedelta = DEFAULT_LATE_AFTER,
    on_time_since: datetime | None = None,
) -> MaterializeResult:
    """Materialize at most ``batch_size`` due definitions of each kind, recurring ones
    first, then one-shots: those due after ``on_time_since`` first (the newest due first),
    then the oldest due. ``more`` says whether a batch was full."""
    result = MaterializeResult()
    for kinds in (["cron", "rrule", "union"], ["once"]):
        result.add(
            _materialize_batch(
                conn,
                kinds=kinds,
                now=now,
                batch_size=batch_size,
                late_after=late_after,
                on_time_since=on_time_since,
            )
        )
    return result


def _materialize_batch(
    conn: Connection,
    *,
    kinds: list[str],
    now: datetime | None,
    batch_size: int,
    late_after: timedelta,
    on_time_since: datetime | None,
) -> MaterializeResult:
    result = MaterializeResult()
    with conn.transaction():
        at = clock.now(conn, now)
        due = {"now": at, "kinds": kinds, "limit": batch_size}
        rows = conn.execute(queries.get("due_definitions"), due).fetchall()
        if len(rows) >= batch_size and on_time_since is not None:
            rows = _on_time_first(conn, rows, due={**due, "on_time_since": on_time_since})
        columns: dict[str, list[object]] = {
            name: []
            for name in (
                "definition_ids",
                "statuses",
                "scheduled_for",
                "deadlines",
                "reasons",
                "errors",
            )
        }
        advance: dict[str, list[object]] = {"ids": [], "next_run_at": [], "last_scheduled_for": []}
        jittered: dict[str, list[object]] = {
            "definition_ids": [],
            "scheduled_for": [],
            "not_before": [],
        }
        bounded = [row["id"] for row in rows if row["max_queued_runs"] is not None]
        queued = {
            item["definition_id"]: int(item["queued"])
            for item in (
                conn.execute(queries.get("queued_counts"), {"ids": bounded}) if bounded else []
            )
        }
        # Why the suspended ones are (suspend_reasons), for their SKIPPED rows' note.
        suspended = [row["id"] for row in rows if row["suspended"]]
        reasons = {
            item["definition_id"]: item["reason"]
            for item in (
                conn.execute(queries.get("suspend_reasons_of"), {"ids": suspended})
                if suspended
                else []
            )
        }
        found = [
            replace(definition, suspend_reason=reasons[definition.id])
            if definition.id in reasons
            else definition
            for definition in (Definition.from_row(row) for row in rows)
        ]
        excluding = calendars.load_many(conn, found)
        for definition in found:
            try:
                plan = plan_definition(
                    definition,
                    now=at,
                    late_after=late_after,
                    queued=queued.get(definition.id, 0),
                    excluding=excluding.get(definition.id, NO_CALENDARS),
                )
            except Exception as error:
                # One definition that cannot be planned (say, its zone vanished from the tz
                # database) must not block the others. It stays due, so it is retried and
                # reported on every tick until fixed.
                log.error("cannot materialize %s: %s", definition.key, error)
                result.failed_definitions.append(definition.key)
                continue
            for run in plan.runs:
                columns["definition_ids"].append(definition.id)
                columns["statuses"].append(run.status)
                columns["scheduled_for"].append(run.scheduled_for)
                columns["deadlines"].append(run.deadline_at)
                columns["reasons"].append(run.reason)
                columns["errors"].append(run.error)
                if run.not_before is not None:
                    jittered["definition_ids"].append(definition.id)
                    jittered["scheduled_for"].append(run.scheduled_for)
                    jittered["not_before"].append(run.not_before)
                if run.status == "QUEUED":
                    result.queued += 1
                else:
                    result.skipped += 1
            advance["ids"].append(definition.id)
            advance["next_run_at"].append(plan.next_run_at)
            advance["last_scheduled_for"].append(plan.last_scheduled_for)
        if columns["definition_ids"]:
            conn.execute(queries.get("insert_occurrences"), {**columns, "now": at})
        if jittered["definition_ids"]:
            conn.execute(queries.get("set_jittered_starts"), jittered)
        if advance["ids"]:
            conn.execute(queries.get("advance_definitions"), advance)
        result.definitions = len(rows)
        result.more = len(rows) >= batch_size
        result.at = at
    return result


def _on_time_first(
    conn: Connection, oldest: list[dict[str, Any]], *, due: dict[str, Any]
) -> list[dict[str, Any]]:
    """More is due than a batch holds: the definitions due since the previous round go
    first, the newest first, then the oldest of the rest. (Rows of the oldest this leaves
    out stay locked until the commit, not materialized: they are due at the next round.)"""
    punctual = conn.execute(queries.get("due_definitions_on_time"), due).fetchall()
    taken = {row["id"] for row in punctual}
    return (punctual + [row for row in oldest if row["id"] not in taken])[: len(oldest)]


def plan_definition(
    definition: Definition,
    *,
    now: datetime,
    late_after: timedelta = DEFAULT_LATE_AFTER,
    queued: int = 0,
    excluding: Calendars = NO_CALENDARS,
) -> Plan:
    """Decide, without touching the database, which rows a due definition produces.

    ``queued``: how many of its runs are QUEUED already (matters with maxQueuedRuns);
    ``excluding``: the calendars its spec excludes (``engine.calendars.load``)."""
    assert definition.next_run_at is not None
    schedule = definitions.schedule_of(definition)
    stream = schedule.occurrences_after(definition.next_run_at - timedelta(microseconds=1))
    due: list[Occurrence] = []
    upcoming: Occurrence | None = None
    for occurrence in islice(stream, MAX_RECORDED_MISSES + 1):
        if occurrence.at > now:
            upcoming = occurrence
            break
        due.append(occurrence)
    truncated = len(due) > MAX_RECORDED_MISSES
    if truncated:
        # Years of missed minutes: record the oldest ones, find the recent ones directly.
        due = due[:MAX_RECORDED_MISSES]
        due += _recent(schedule, now=now, count=definition.catch_up_limit, after=due[-1].at)
        upcoming = schedule.next_after(now)
    runs = _decide(
        definition,
        due,
        now=now,
        late_after=late_after,
        truncated=truncated,
        queued=queued,
        excluding=excluding,
    )
    return Plan(
        runs=runs,
        next_run_at=upcoming.at if upcoming else None,
        last_scheduled_for=due[-1].at if due else None,
    )


def _decide(
    definition: Definition,
    due: list[Occurrence],
    *,
    now: datetime,
    late_after: timedelta,
    truncated: bool,
    queued: int,
    excluding: Calendars,
) -> list[NewRun]:
    excluded = {
        occurrence.at: name
        for occurrence in due
        if not occurrence.skipped and (name := excluding.excluding(occurrence)) is not None
    }
    runnable = [
        occurrence.at
        for occurrence in due
        if not occurrence.skipped and occurrence.at not in excluded
    ]
    if definition.is_suspended:
        chosen: set[datetime] = set()
    elif definition.catch_up == "all":
        chosen = set(runnable[-definition.catch_up_limit :])
    elif definition.catch_up == "none":
        chosen = {runnable[-1]} if runnable and now - runnable[-1] <= late_after else set()
    else:
        chosen = set(runnable[-1:])
    deadline = (
        timedelta(seconds=definition.starting_deadline_seconds)
        if definition.starting_deadline_seconds
        else None
    )
    spread = jitter.seconds_of(definition.spec)
    runs = []
    for index, occurrence in enumerate(due):
        at = occurrence.at
        start = at + jitter.delay(definition.id, at, seconds=spread)
        if occurrence.skipped:
            runs.append(NewRun(at, "SKIPPED", "DSTGap", _DST_GAP_NOTE))
        elif at in excluded:
            runs.append(
                NewRun(at, "SKIPPED", "CalendarExcluded", excluded_note(excluded[at], occurrence))
            )
        elif definition.is_suspended:
            why = definition.suspended_why
            runs.append(NewRun(at, "SKIPPED", "Suspended", f"the definition is suspended: {why}"))
        elif at not in chosen:
            note = _missed_note(definition, late_after)
            if truncated and index == MAX_RECORDED_MISSES - 1:
                note += (
                    "; more occurrences after this one were missed and are not recorded one by one"
                )
            runs.append(NewRun(at, "SKIPPED", "MissedDowntime", note))
        elif deadline is not None and start + deadline <= now:
            runs.append(
                NewRun(
                    at,
                    "SKIPPED",
                    "DeadlineMissed",
                    f"materialized {wording.seconds((now - at).total_seconds())} late, past"
                    f" startingDeadlineSeconds ({definition.starting_deadline_seconds})",
                )
            )
        elif definition.max_queued_runs is not None and queued >= definition.max_queued_runs:
            runs.append(
                NewRun(
                    at,
                    "SKIPPED",
                    "QueueFull",
                    f"{wording.plural(queued, 'run was', 'runs were')} already queued, the most"
                    f" maxQueuedRuns ({definition.max_queued_runs}) allows",
                )
            )
        else:
            queued += 1
            runs.append(
                NewRun(
                    at,
                    "QUEUED",
                    deadline_at=start + deadline if deadline else None,
                    not_before=start if start > at else None,
                )
            )
    return runs


def excluded_note(calendar: str, occurrence: Occurrence) -> str:
    """The error of a ``SKIPPED/CalendarExcluded`` run: the calendar and the day."""
    local = occurrence.at.astimezone(occurrence.zone) if occurrence.zone else occurrence.at
    zone = f" in {occurrence.zone.key}" if occurrence.zone else ""
    return f"Calendar {calendar} excludes {local:%Y-%m-%d}{zone} (spec.calendars.exclude)"


_DST_GAP_NOTE = "the local time does not exist on this day (DST gap) and dstPolicy.gap is skip"


def _missed_note(definition: Definition, late_after: timedelta) -> str:
    if definition.catch_up == "all":
        return f"missed; catchUp is all but only the latest catchUpLimit ({definition.catch_up_limit}) run"
    if definition.catch_up == "none":
        return f"missed by more than {int(late_after.total_seconds())}s and catchUp is none"
    return "missed; catchUp is latest, so only the most recent missed occurrence runs"


def _recent(schedule: Stream, *, now: datetime, count: int, after: datetime) -> list[Occurrence]:
    """The last ``count`` occurrences in (after, now], found by widening a window back
    from now instead of walking forward through years of occurrences."""
    window = timedelta(hours=1)
    while True:
        start = max(after, now - window)
        found = list(_until(schedule.occurrences_after(start), now))
        if len(found) >= count or start == after:
            return found[-count:]
        window *= 4


def _until(stream: Iterator[Occurrence], end: datetime) -> Iterator[Occurrence]:
    for occurrence in stream:
        if occurrence.at > end:
            return
        yield occurrence
