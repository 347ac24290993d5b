"""The overview of ScheduledJobs and one ScheduledJob's page: its timeline, next
occurrences, runs and spec in force (the shared pieces are in :mod:`pgsched.ui.pieces`, the
"why didn't it run" page in :mod:`pgsched.ui.why_page`, a run's page in
:mod:`pgsched.ui.run_page`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from pgsched.engine import calendars, definitions, runs, starts
from pgsched.engine.models import Definition, Run
from pgsched.schedule import ScheduleError, zones
from pgsched.schedule.calendars import Calendars
from pgsched.ui import html, pieces, store, why_page
from pgsched.ui.html import e, link

PAGE_SIZE = 50
STRIP = 20
TIMELINE_RUNS = 500
NEXT_COUNT = 10
MAX_DAYS = 31
HEALTHS = ("ready", "suspended", "failing", "rejected")


# --- overview ---------------------------------------------------------------------------


def overview(ctx: pieces.Context, query: Mapping[str, str]) -> pieces.Page:
    pieces.only(query, ("namespace", "status", "name", "after"))
    namespace = pieces.text(query, "namespace")
    name = pieces.text(query, "name")
    health = pieces.text(query, "status")
    if health is not None and health not in HEALTHS:
        raise pieces.PageError(
            400,
            f"status={health[:40]!r} is not one of {', '.join(HEALTHS)} (example: status=suspended)",
        )
    after = ("", "")
    cursor = pieces.text(query, "after")
    if cursor is not None:
        first, slash, second = cursor.partition("/")
        if not slash or not first or not second:
            raise pieces.PageError(
                400,
                "after= is a NAMESPACE/NAME cursor from a next-page link (example: after=team-a/nightly)",
            )
        after = (first, second)
    if namespace is not None:
        pieces.allowed(ctx, namespace)
        visible = [namespace]
    else:
        visible = [ns for ns in store.namespaces(ctx.conn) if ctx.access.allows(ctx.user, ns)]
    rows = store.overview(
        ctx.conn,
        namespaces=visible,
        name=name,
        health=health,
        after=after,
        limit=PAGE_SIZE + 1,
        strip=STRIP,
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    body = [_filters(visible if namespace is None else [namespace], namespace, health, name)]
    if not rows:
        body.append("<p>No ScheduledJobs match (or none in a namespace you may see).</p>")
    table_rows = []
    for row in rows:
        d = row.definition
        zone = pieces.zone_of(d)
        cells = "".join(
            link(
                pieces.run_url(cell.id),
                "",
                **{
                    "class": f"cell {cell.status}",
                    "title": f"run {cell.id} {cell.status}{'/' + cell.reason if cell.reason else ''}"
                    f" {cell.trigger} {html.local(cell.scheduled_for, zone)}",
                },
            )
            for cell in row.strip
        )
        table_rows.append(
            [
                e(d.namespace),
                link(pieces.job_url(d), d.name),
                e(pieces.schedule_words(d)),
                pieces.health_badge(d, row.health, row.refusal),
                e(html.local(d.next_run_at, zone)) if not d.is_suspended else "suspended",
                f"<span class='strip'>{cells}</span>",
                e(row.queued),
                e(row.active),
            ]
        )
    if table_rows:
        body.append(
            html.table(
                [
                    "namespace",
                    "name",
                    "schedule",
                    "health",
                    "next run",
                    f"last {STRIP} runs",
                    "queued",
                    "active",
                ],
                table_rows,
                id="overview",
            )
        )
    if more:
        last = rows[-1].definition
        params = {
            "namespace": namespace,
            "status": health,
            "name": name,
            "after": f"{last.namespace}/{last.name}",
        }
        body.append(f"<p>{link(html.url('/', params), 'next page →', rel='next')}</p>")
    return pieces.Page("ScheduledJobs", "".join(body))


def _filters(
    namespaces: list[str], namespace: str | None, health: str | None, name: str | None
) -> str:
    options = "<option value=''>all</option>" + "".join(
        f"<option{' selected' if ns == namespace else ''}>{e(ns)}</option>" for ns in namespaces
    )
    statuses = "<option value=''>any</option>" + "".join(
        f"<option{' selected' if item == health else ''}>{item}</option>" for item in HEALTHS
    )
    return (
        "<form class='filters' method='get' action='/'>"
        f"<label>namespace<br><select name='namespace'>{options}</select></label>"
        f"<label>status<br><select name='status'>{statuses}</select></label>"
        f"<label>name contains<br><input name='name' value='{e(name or '')}'></label>"
        "<button>filter</button></form>"
    )


# --- one ScheduledJob -------------------------------------------------------------------


def job(ctx: pieces.Context, namespace: str, name: str, query: Mapping[str, str]) -> pieces.Page:
    pieces.only(query, ("days", "before"))
    days = pieces.number(query, "days", default=7, low=1, high=MAX_DAYS)
    before = pieces.number(query, "before", default=None, low=1, high=2**63 - 1)
    assert days is not None
    d = pieces.definition(ctx, namespace, name)
    zone = pieces.zone_of(d)
    first_day = ctx.now.astimezone(zone).date() - timedelta(days=days)
    since = datetime.combine(first_day, datetime.min.time(), zone).astimezone(UTC)
    recent = [
        run
        for run in runs.history(ctx.conn, d.id, limit=TIMELINE_RUNS)
        if run.scheduled_for >= since
    ]
    recent.reverse()
    body = [
        html.fields(
            [
                ("ScheduledJob", e(d.key)),
                (
                    "Schedule",
                    f"{e(pieces.schedule_words(d))} <code>{e(d.schedule_kind)}: {e(d.schedule)}</code>",
                ),
                (
                    "Health",
                    pieces.health_badge(d, pieces.health_of(d), starts.refusal(ctx.conn, d)),
                ),
                ("Next run", e(html.local(d.next_run_at, zone))),
                (
                    "Concurrency",
                    e(f"{d.concurrency_policy}, at most {d.max_concurrent_runs} running"),
                ),
                ("Catch-up", e(f"{d.catch_up} (limit {d.catch_up_limit})")),
            ]
        ),
        why_page.form(d, ""),
        f"<h2>Timeline, last {days} days</h2>",
        "<p>"
        + " ".join(
            link(html.url(pieces.job_url(d), {"days": n}), f"{n} days") for n in (1, 3, 7, 14, 31)
        )
        + "</p>",
        _timeline(d, zone, recent, since=since, now=ctx.now),
        f"<h2>Next {NEXT_COUNT} occurrences</h2>",
        _upcoming(d, zone, ctx.now, calendars.load(ctx.conn, d)),
        "<h2>Runs</h2>",
        _runs_table(ctx, d, zone, before),
        "<h2>Spec in force</h2>",
        f"<p>generation {e(d.generation)}, updated {e(html.local(d.updated_at, zone))}</p>",
        f"<pre id='spec'>{e(json.dumps(d.spec, indent=2, sort_keys=True))}</pre>",
    ]
    return pieces.Page(d.key, "".join(body))


def _offset(offset: timedelta) -> str:
    """+0200 / -0500, like strftime's %z."""
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def _timeline(
    d: Definition, zone: ZoneInfo, recent: list[Run], *, since: datetime, now: datetime
) -> str:
    first_day = since.astimezone(zone).date()
    last_day = now.astimezone(zone).date()
    shifts = [
        (t.at, _offset(t.offset_before), _offset(t.offset_after))
        for t in zones.transitions(zone, since, now)
    ]
    rows = []
    day = first_day
    while day <= last_day:
        start = datetime.combine(day, datetime.min.time(), zone).astimezone(UTC)
        end = datetime.combine(day + timedelta(days=1), datetime.min.time(), zone).astimezone(UTC)
        span = (end - start).total_seconds()

        def left(moment: datetime, start: datetime = start, span: float = span) -> float:
            return max(0.0, min(100.0, (moment - start).total_seconds() / span * 100))

        marks = []
        for run in recent:
            if not start <= run.scheduled_for < end:
                continue
            title = e(
                f"run {run.id} {run.status}{'/' + run.reason if run.reason else ''} {run.trigger}"
                f" attempt {run.attempt} scheduled {html.local(run.scheduled_for, zone)}"
            )
            if run.started_at is not None:
                width = max(0.2, left(run.finished_at or now) - left(run.started_at))
                marks.append(
                    f"<a href='{pieces.run_url(run.id)}' class='bar {e(run.status)}' title='{title}'"
                    f" style='left:{left(run.started_at):.3f}%;width:{width:.3f}%'></a>"
                )
            else:
                marks.append(
                    f"<a href='{pieces.run_url(run.id)}' class='mark {e(run.status)}' title='{title}'"
                    f" style='left:{left(run.scheduled_for):.3f}%'></a>"
                )
        for at, old, new in shifts:
            if start <= at < end:
                marks.append(
                    f"<span class='dst' title='DST: {old} → {new}' style='left:{left(at):.3f}%'></span>"
                )
        hours = f" ({span / 3600:.0f} h)" if span != 86400 else ""
        rows.append(
            f"<div class='day'><span class='daylabel'>{day.isoformat()}{hours}</span>{''.join(marks)}</div>"
        )
        day += timedelta(days=1)
    axis = (
        "<div class='hours'>" + "".join(f"<span>{h:02d}</span>" for h in range(0, 25, 3)) + "</div>"
    )
    events: list[tuple[datetime, list[str], str]] = []
    for run in recent:
        retry = (
            link(pieces.run_url(run.retry_of), f"retry of run {run.retry_of}")
            if run.retry_of
            else ""
        )
        cells = [
            e(html.local(run.scheduled_for, zone)),
            link(pieces.run_url(run.id), run.id),
            pieces.trigger_badge(run.trigger),
            e(run.attempt),
            pieces.status_cell(run),
            retry,
            e(html.local(run.started_at, zone)),
            e(html.local(run.finished_at, zone)),
            pieces.duration(run, now),
            e(run.error),
        ]
        events.append((run.scheduled_for, cells, "skipped" if run.status == "SKIPPED" else ""))
    for at, old, new in shifts:
        note = f"DST transition: UTC offset {old} → {new}"
        events.append(
            (
                at,
                [e(html.local(at, zone)), "", "", "", f"<b>{e(note)}</b>", "", "", "", "", ""],
                "dstrow",
            )
        )
    events.sort(key=lambda item: item[0])
    listing = "".join(
        f"<tr class='{cls}'>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
        for _, cells, cls in events
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "scheduled",
            "run",
            "trigger",
            "attempt",
            "status",
            "retry",
            "started",
            "finished",
            "duration",
            "error",
        )
    )
    empty = "" if recent else "<p>No runs in this window.</p>"
    capped = (
        f"<p>Showing the latest {TIMELINE_RUNS} runs only.</p>"
        if len(recent) >= TIMELINE_RUNS
        else ""
    )
    return (
        f"<div id='timeline'>{axis}{''.join(rows)}</div>{empty}{capped}"
        f"<table id='events'><thead><tr>{head}</tr></thead><tbody>{listing}</tbody></table>"
    )


def _upcoming(d: Definition, zone: ZoneInfo, now: datetime, excluding: Calendars) -> str:
    if d.next_run_at is None:
        return "<p>No further occurrence.</p>"
    after = max(d.next_run_at - timedelta(microseconds=1), now)
    overdue = ""
    if d.next_run_at < now - timedelta(minutes=1):
        overdue = (
            f"<p class='error'>Overdue since {e(html.local(d.next_run_at, zone))}: is an operator"
            f" leading ticks? Missed occurrences follow catchUp: {e(d.catch_up)}.</p>"
        )
    try:
        upcoming = definitions.schedule_of(d).upcoming(
            after, count=NEXT_COUNT, exclusions=excluding
        )
    except ScheduleError as error:
        return f"<p class='error'>{e(error)}</p>"
    note = (
        "<p>Suspended: these are recorded as SKIPPED/Suspended until it is resumed.</p>"
        if d.is_suspended
        else ""
    )
    rows = [
        [e(index), e(html.local(item.at, zone)), e(item.at.isoformat())]
        for index, item in enumerate(upcoming, 1)
    ]
    return overdue + note + html.table(["#", "local time", "UTC"], rows, id="upcoming")


def _runs_table(ctx: pieces.Context, d: Definition, zone: ZoneInfo, before: int | None) -> str:
    page = store.runs_before(ctx.conn, d.id, before=before, limit=PAGE_SIZE + 1)
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    rows = [
        [
            link(pieces.run_url(run.id), run.id),
            pieces.status_cell(run),
            pieces.trigger_badge(run.trigger),
            e(run.attempt),
            e(html.local(run.scheduled_for, zone)),
            e(html.local(run.started_at, zone)),
            e(html.local(run.finished_at, zone)),
            pieces.duration(run, ctx.now),
        ]
        for run in page
    ]
    if not rows:
        return "<p>No runs.</p>"
    out = html.table(
        ["run", "status", "trigger", "attempt", "scheduled", "started", "finished", "duration"],
        rows,
        id="runs",
    )
    if more:
        out += f"<p>{link(html.url(pieces.job_url(d), {'before': page[-1].id}), 'older runs →', rel='next')}</p>"
    return out
