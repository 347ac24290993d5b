"""The pages: read the database (and, for a run, Kubernetes) and render HTML.

Each page is a plain function of a :class:`Context` and the request's parameters that
returns the page body or raises :class:`PageError` (a 4xx with a message saying what was
wrong and what would be right). Pages only read: nothing a visitor sends changes anything.
Access is checked before anything is looked up, so a 403 says nothing about what exists:
a namespace's pages answer 403 to a visitor who may not ``get scheduledjobs`` there, also
for a job that does not exist; a run (whose URL names no namespace) that does not exist and
one in a namespace the visitor may not see get the same 404, byte for byte. A run's Job
and pods are shown only to who may ``get jobs`` and ``list pods`` in its namespace, its log
only to who may ``get pods/log``, and at most LOG_LINES lines and LOG_BYTES bytes of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from pgsched import wording
from pgsched.db.connection import Connection
from pgsched.engine import calendars, definitions, pools, run_facts, runs, starts, waits
from pgsched.engine.models import Definition, Run, Start
from pgsched.k8s import api, names
from pgsched.schedule import ScheduleError, zones
from pgsched.schedule.calendars import Calendars
from pgsched.ui import access as acl
from pgsched.ui import html, store, why, words
from pgsched.ui.html import e, link

PAGE_SIZE = 50
STRIP = 20
TIMELINE_RUNS = 500
NEXT_COUNT = 10
MAX_DAYS = 31
LOG_LINES = 200
LOG_BYTES = 64 * 1024  # the kubelet stops reading there (limitBytes): a huge line stays cheap
HEALTHS = ("ready", "suspended", "failing", "rejected")
_MAX_TEXT = 253  # a Kubernetes name is at most 253 characters


class PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Context:
    conn: Connection
    access: acl.Access
    user: acl.User
    now: datetime


@dataclass(frozen=True)
class Page:
    title: str
    body: str


# --- parameters -------------------------------------------------------------------------


def _only(query: Mapping[str, str], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise PageError(400, f"unknown parameter {unknown[0]!r}; this page takes: {known}")


def _text(query: Mapping[str, str], key: str) -> str | None:
    value = query.get(key, "").strip()
    if len(value) > _MAX_TEXT or "\x00" in value:
        raise PageError(400, f"{key}: at most {_MAX_TEXT} printable characters")
    return value or None


def _number(
    query: Mapping[str, str], key: str, *, default: int | None, low: int, high: int
) -> int | None:
    text = query.get(key, "").strip()
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise PageError(
            400,
            f"{key}={text[:40]!r} is not a whole number from {low} to {high} (example: {key}={low})",
        )
    return int(text)


def _allowed(ctx: Context, namespace: str) -> None:
    if not ctx.access.allows(ctx.user, namespace):
        raise PageError(403, f"you may not get scheduledjobs in namespace {namespace!r}")


def _definition(ctx: Context, namespace: str, name: str) -> Definition:
    _allowed(ctx, namespace)
    found = definitions.find(ctx.conn, namespace, name)
    if found is None:
        raise PageError(
            404,
            f"no ScheduledJob {namespace}/{name} in the pgsched database (check the name, or go back to the overview)",
        )
    return found


# --- shared pieces ----------------------------------------------------------------------


def job_url(definition: Definition) -> str:
    return f"/ns/{definition.namespace}/{definition.name}"


def run_url(run_id: int) -> str:
    return f"/runs/{run_id}"


def _zone(definition: Definition) -> ZoneInfo:
    try:
        return zones.load_zone(definition.time_zone)
    except ScheduleError:
        return ZoneInfo("UTC")


def _health(definition: Definition, health: str) -> str:
    reason = ""
    if health == "suspended":
        reason = definition.suspended_why
    elif health == "failing":
        reason = wording.plural(definition.consecutive_failures, "consecutive failure")
    elif health == "rejected":
        reason = definition.rejection or ""
    label = {
        "ready": "Ready",
        "suspended": "Suspended",
        "failing": "Failing",
        "rejected": "Rejected",
    }[health]
    return f"<span class='badge {health}'>{label}</span> {e(reason) if reason else ''}"


def _health_of(definition: Definition) -> str:
    """The overview query's ``health`` column (ui.sql), for one definition."""
    if definition.rejected_generation is not None:
        return "rejected"
    if definition.is_suspended:
        return "suspended"
    return "failing" if definition.consecutive_failures > 0 else "ready"


def _trigger(trigger: str) -> str:
    return f"<span class='trigger trigger-{e(trigger)}'>{e(trigger)}</span>"


def _status(run: Run, start: Start | None = None) -> str:
    reason = f"/{run.reason}" if run.reason else ""
    shown = starts.shown_status(run, start)
    return f"<span class='cell {e(run.status)}'></span> {e(shown)}{e(reason) if reason else ''}"


def _duration(run: Run, now: datetime) -> str:
    if run.started_at is None:
        return html.NOTHING
    return html.duration((run.finished_at or now) - run.started_at)


def _schedule_words(definition: Definition) -> str:
    return words.describe(definition.schedule_kind, definition.schedule, definition.time_zone)


# --- overview ---------------------------------------------------------------------------


def overview(ctx: Context, query: Mapping[str, str]) -> Page:
    _only(query, ("namespace", "status", "name", "after"))
    namespace = _text(query, "namespace")
    name = _text(query, "name")
    health = _text(query, "status")
    if health is not None and health not in HEALTHS:
        raise PageError(
            400,
            f"status={health[:40]!r} is not one of {', '.join(HEALTHS)} (example: status=suspended)",
        )
    after = ("", "")
    cursor = _text(query, "after")
    if cursor is not None:
        first, slash, second = cursor.partition("/")
        if not slash or not first or not second:
            raise PageError(
                400,
                "after= is a NAMESPACE/NAME cursor from a next-page link (example: after=team-a/nightly)",
            )
        after = (first, second)
    if namespace is not None:
        _allowed(ctx, namespace)
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
        zone = _zone(d)
        cells = "".join(
            link(
                run_url(cell.id),
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
                link(job_url(d), d.name),
                e(_schedule_words(d)),
                _health(d, row.health),
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
    return Page("ScheduledJobs", "".join(body))


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


def job(ctx: Context, namespace: str, name: str, query: Mapping[str, str]) -> Page:
    _only(query, ("days", "before"))
    days = _number(query, "days", default=7, low=1, high=MAX_DAYS)
    before = _number(query, "before", default=None, low=1, high=2**63 - 1)
    assert days is not None
    d = _definition(ctx, namespace, name)
    zone = _zone(d)
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
                    f"{e(_schedule_words(d))} <code>{e(d.schedule_kind)}: {e(d.schedule)}</code>",
                ),
                ("Health", _health(d, _health_of(d))),
                ("Next run", e(html.local(d.next_run_at, zone))),
                (
                    "Concurrency",
                    e(f"{d.concurrency_policy}, at most {d.max_concurrent_runs} running"),
                ),
                ("Catch-up", e(f"{d.catch_up} (limit {d.catch_up_limit})")),
            ]
        ),
        _why_form(d, ""),
        f"<h2>Timeline, last {days} days</h2>",
        "<p>"
        + " ".join(link(html.url(job_url(d), {"days": n}), f"{n} days") for n in (1, 3, 7, 14, 31))
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
    return Page(d.key, "".join(body))


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
                    f"<a href='{run_url(run.id)}' class='bar {e(run.status)}' title='{title}'"
                    f" style='left:{left(run.started_at):.3f}%;width:{width:.3f}%'></a>"
                )
            else:
                marks.append(
                    f"<a href='{run_url(run.id)}' class='mark {e(run.status)}' title='{title}'"
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
        retry = link(run_url(run.retry_of), f"retry of run {run.retry_of}") if run.retry_of else ""
        cells = [
            e(html.local(run.scheduled_for, zone)),
            link(run_url(run.id), run.id),
            _trigger(run.trigger),
            e(run.attempt),
            _status(run),
            retry,
            e(html.local(run.started_at, zone)),
            e(html.local(run.finished_at, zone)),
            _duration(run, now),
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


def _runs_table(ctx: Context, d: Definition, zone: ZoneInfo, before: int | None) -> str:
    page = store.runs_before(ctx.conn, d.id, before=before, limit=PAGE_SIZE + 1)
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    rows = [
        [
            link(run_url(run.id), run.id),
            _status(run),
            _trigger(run.trigger),
            e(run.attempt),
            e(html.local(run.scheduled_for, zone)),
            e(html.local(run.started_at, zone)),
            e(html.local(run.finished_at, zone)),
            _duration(run, ctx.now),
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
        out += f"<p>{link(html.url(job_url(d), {'before': page[-1].id}), 'older runs →', rel='next')}</p>"
    return out


# --- why didn't it run ------------------------------------------------------------------


def _why_form(d: Definition, value: str) -> str:
    return (
        f"<form class='filters' method='get' action='{e(job_url(d))}/why'>"
        f"<label>Why didn't it run at … (local time in {e(d.time_zone)})<br>"
        f"<input name='at' placeholder='2026-06-01 09:00' value='{e(value)}'></label>"
        "<button>explain</button></form>"
    )


def parse_local(text: str, zone: ZoneInfo) -> tuple[datetime, str]:
    """A local time typed by a user (``2026-06-01 09:00``, ISO 8601, an offset allowed), as
    an instant, and a note when that wall-clock time does not exist or happens twice."""
    try:
        moment = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise PageError(
            400,
            f"at={text[:40]!r} is not a date and time (examples: 2026-06-01 09:00, 2026-06-01T09:00+03:00)",
        ) from None
    note = ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    try:
        instant = moment.astimezone(UTC)
        if moment.tzinfo is zone:
            note = _dst_note(moment, zone)
    except OverflowError:
        raise PageError(400, f"at={text[:40]!r} is out of range") from None
    return instant, note


def _dst_note(moment: datetime, zone: ZoneInfo) -> str:
    wall = moment.replace(tzinfo=None)
    typed = f"{wall:%Y-%m-%d %H:%M}"
    if zones.to_wall(moment.astimezone(UTC), zone) != wall:
        return (
            f"{typed} does not exist in {zone.key}: the clocks jump forward over it"
            f" (spec.dstPolicy.gap decides what a schedule does there); read as"
            f" {html.local(moment, zone)}."
        )
    later = moment.replace(fold=1)
    if later.utcoffset() != moment.utcoffset():
        return (
            f"{typed} happens twice in {zone.key}; this is the first ({moment:%Z}). For the"
            f" second, give its offset: {wall:%Y-%m-%dT%H:%M}{later:%z}."
        )
    return ""


def why_page(ctx: Context, namespace: str, name: str, query: Mapping[str, str]) -> Page:
    _only(query, ("at",))
    d = _definition(ctx, namespace, name)
    zone = _zone(d)
    text = _text(query, "at")
    body = [_why_form(d, text or ""), f"<p>{link(job_url(d), '← ' + d.key)}</p>"]
    if text is None:
        return Page(f"{d.key}: why didn't it run?", "".join(body))
    asked, dst_note = parse_local(text, zone)
    if dst_note:
        body.append(f"<p class='error' id='dst-note'>{e(dst_note)}</p>")
    if asked.year < 1971 or asked.year > 9000:
        raise PageError(400, f"at={text[:40]!r} is out of range (years 1971 to 9000)")
    answer = why.explain(
        d,
        asked,
        runs_at=lambda instants: store.occurrence_runs(ctx.conn, d.id, instants),
        now=why.Now(
            ctx.now,
            waits_of=lambda ids: waits.of_runs(ctx.conn, ids, now=ctx.now),
            pool_found=pools.found_for(ctx.conn, d),
            calendars=calendars.load(ctx.conn, d),
        ),
    )
    if answer.matched is not None:
        fate = answer.matched
        head = f"{html.local(fate.at, zone)} is an occurrence of {_schedule_words(d)}: {fate.note}."
        body.append(
            f"<div class='answer' id='answer' data-verdict='{e(answer.verdict)}'><p>{e(head)}</p>{_fate_runs(fate, zone, ctx.now)}</div>"
        )
    else:
        lead = (
            f"Never scheduled: {_schedule_words(d)} has no occurrence at {html.local(asked, zone)}."
        )
        if answer.excluded_by is not None:
            lead = (
                f"Excluded: the rule's EXDATE {answer.excluded_by:%Y-%m-%dT%H:%M:%S}"
                f" ({d.time_zone}) removes the occurrence at {html.local(asked, zone)}."
            )
        parts = [f"<p>{e(lead)} Nearest matches:</p><ul>"]
        for label, near in (("before", answer.before), ("after", answer.after)):
            if near is None:
                parts.append(f"<li>{label}: none</li>")
            else:
                parts.append(
                    f"<li>{label}: {e(html.local(near.at, zone))} — {e(near.note)}{_fate_runs(near, zone, ctx.now)}</li>"
                )
        parts.append("</ul>")
        body.append(
            f"<div class='answer' id='answer' data-verdict='{e(answer.verdict)}'>{''.join(parts)}</div>"
        )
    body.append(
        "<p>Occurrences are those of the spec in force now; an earlier spec may have had others.</p>"
    )
    return Page(f"{d.key}: why didn't it run?", "".join(body))


def _fate_runs(fate: why.Fate, zone: ZoneInfo, now: datetime) -> str:
    if not fate.runs:
        return ""
    rows = [
        [
            link(run_url(run.id), run.id),
            e(run.attempt),
            _trigger(run.trigger),
            _status(run),
            e(run.error),
            _duration(run, now),
        ]
        for run in fate.runs
    ]
    return html.table(["run", "attempt", "trigger", "status", "error", "duration"], rows)


# --- one run ----------------------------------------------------------------------------


def run_page(ctx: Context, run_id: str, query: Mapping[str, str]) -> Page:
    _only(query, ())
    if not run_id.isdigit() or not 1 <= int(run_id) < 2**63:
        raise PageError(
            400,
            f"{run_id[:40]!r} is not a run id: run ids are positive integers (example: /runs/4711)",
        )
    found = runs.get(ctx.conn, int(run_id))
    d = definitions.get(ctx.conn, found.definition_id) if found is not None else None
    if found is None or d is None or not ctx.access.allows(ctx.user, d.namespace):
        # One answer for "no such run" and "not yours": an id says nothing about others'.
        raise PageError(404, "no such run in a namespace you may see (check the run id)")
    zone = _zone(d)
    facts = run_facts.of_run(ctx.conn, found, d, now=ctx.now, zone=zone)
    chain = facts.attempts

    def shown(label: str, value: run_facts.Value) -> str:
        if label == "Status":
            return f"<span class='cell {e(found.status)}'></span> {e(value)}"
        if label == "ScheduledJob":
            return link(job_url(d), value)
        if isinstance(value, tuple):
            return "".join(
                link(run_url(part.run_id), part.text)
                if isinstance(part, run_facts.RunLink)
                else e(part)
                for part in value
            )
        if isinstance(value, datetime):
            return e(html.local(value, zone))
        if isinstance(value, timedelta):
            return e(wording.duration(value))
        return e(value)

    body = [html.fields([(label, shown(label, value)) for label, value in facts.lines])]
    if len(chain) > 1:
        rows = [
            [
                e(item.attempt),
                link(run_url(item.id), item.id) + (" ◀" if item.id == found.id else ""),
                _status(item),
                e(html.local(item.scheduled_for, zone)),
                e(html.local(item.finished_at, zone)),
                e(item.k8s_job_name),
            ]
            for item in chain
        ]
        body.append(
            "<h2>Retry chain</h2>"
            + html.table(
                ["attempt", "run", "status", "scheduled", "finished", "job"], rows, id="chain"
            )
        )
    body.append(_kubernetes(ctx, d, found))
    return Page(f"run {found.id} of {d.key}", "".join(body))


def _kubernetes(ctx: Context, d: Definition, run: Run) -> str:
    kube = ctx.access.kube
    if kube is None:
        return "<h2>Kubernetes</h2><p>Not shown: this is a database-only view (--no-auth).</p>"
    if run.k8s_job_name is None:
        return "<h2>Kubernetes</h2><p>No Job was created for this run.</p>"
    parts = ["<h2>Kubernetes Job</h2>"]
    if not ctx.access.allows(ctx.user, d.namespace, acl.JOBS):
        return "".join(parts) + _hidden("Job", "get jobs", d.namespace)
    try:
        job_object = kube.get(
            api.path_of(group="batch", namespace=d.namespace, plural="jobs", name=run.k8s_job_name)
        )
    except api.ApiError as error:
        if error.not_found:
            return (
                "".join(parts)
                + f"<p>Job {e(run.k8s_job_name)} no longer exists (history limits or TTL removed it).</p>"
            )
        return "".join(parts) + f"<p class='error'>cannot read the Job: {e(error.message)}</p>"
    status = job_object.get("status") or {}
    conditions = ", ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}".strip()
        for c in status.get("conditions") or []
    )
    parts.append(
        html.fields(
            [
                ("Name", e(run.k8s_job_name)),
                (
                    "Active / succeeded / failed",
                    e(
                        f"{status.get('active', 0)} / {status.get('succeeded', 0)} / {status.get('failed', 0)}"
                    ),
                ),
                ("Conditions", e(conditions or None)),
            ]
        )
    )
    if not ctx.access.allows(ctx.user, d.namespace, acl.PODS):
        return "".join(parts) + "<h2>Pods</h2>" + _hidden("pods and log", "list pods", d.namespace)
    try:
        pods = (
            kube.get(
                api.path_of(namespace=d.namespace, plural="pods"),
                labelSelector=f"{names.LABEL_RUN_ID}={run.id}",
            ).get("items")
            or []
        )
    except api.ApiError as error:
        return (
            "".join(parts) + f"<p class='error'>cannot list the Job's pods: {e(error.message)}</p>"
        )
    parts.append("<h2>Pods</h2>")
    if not pods:
        parts.append("<p>No pod exists for this run any more.</p>")
    rows = []
    for pod in pods:
        states = []
        for item in (pod.get("status") or {}).get("containerStatuses") or []:
            state = item.get("state") or {}
            kind = next(iter(state), "unknown")
            detail = state.get(kind) or {}
            states.append(
                f"{item.get('name')}: {kind} {detail.get('reason') or ''} {detail.get('exitCode', '')}".strip()
            )
        rows.append(
            [
                e(pod["metadata"]["name"]),
                e((pod.get("status") or {}).get("phase")),
                e("; ".join(states) or None),
            ]
        )
    if rows:
        parts.append(html.table(["pod", "phase", "containers"], rows, id="pods"))
        parts.append(_log(ctx, kube, d, pods[0]))
    return "".join(parts)


def _hidden(what: str, verb: str, namespace: str) -> str:
    return f"<p class='hidden'>{e(what)} not shown: you may not {e(verb)} in {e(namespace)}.</p>"


def _log(ctx: Context, kube: api.KubeApi, d: Definition, pod: dict[str, object]) -> str:
    if not ctx.access.allows(ctx.user, d.namespace, acl.POD_LOGS):
        return _hidden("Log", "get pods/log", d.namespace)
    metadata = pod["metadata"]
    spec = pod.get("spec")
    assert isinstance(metadata, dict) and isinstance(spec, dict)
    containers = [
        item["name"] for item in spec.get("containers") or [] if item["name"] != names.SIDECAR_NAME
    ]
    if not containers:
        return ""
    path = api.path_of(
        namespace=d.namespace, plural="pods", name=str(metadata["name"]), subresource="log"
    )
    try:
        text = kube.get_text(
            path, container=containers[0], tailLines=LOG_LINES, limitBytes=LOG_BYTES
        )
    except api.ApiError as error:
        return f"<p class='error'>cannot read the log: {e(error.message)}</p>"
    cut = (
        f"<p id='log-cut'>Cut at {LOG_BYTES // 1024} KiB: <code>kubectl logs</code> has the rest.</p>"
        if len(text.encode()) >= LOG_BYTES
        else ""
    )
    return (
        f"<h2>Log of {e(containers[0])} (last {LOG_LINES} lines, at most {LOG_BYTES // 1024} KiB)</h2>"
        f"<pre id='log'>{e(text)}</pre>{cut}"
    )
