"""The "why didn't it run at …" page: a local time as typed, read in the job's zone (with a
note when the clocks skip or repeat it), and what the schedule and the runs say about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pgsched.engine import calendars, pools, waits
from pgsched.engine.models import Definition
from pgsched.schedule import zones
from pgsched.ui import html, pieces, store, why
from pgsched.ui.html import e, link


def form(d: Definition, value: str) -> str:
    return (
        f"<form class='filters' method='get' action='{e(pieces.job_url(d))}/why'>"
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
        raise pieces.PageError(
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
        raise pieces.PageError(400, f"at={text[:40]!r} is out of range") from None
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


def page(ctx: pieces.Context, namespace: str, name: str, query: Mapping[str, str]) -> pieces.Page:
    pieces.only(query, ("at",))
    d = pieces.definition(ctx, namespace, name)
    zone = pieces.zone_of(d)
    text = pieces.text(query, "at")
    body = [form(d, text or ""), f"<p>{link(pieces.job_url(d), '← ' + d.key)}</p>"]
    if text is None:
        return pieces.Page(f"{d.key}: why didn't it run?", "".join(body))
    asked, dst_note = parse_local(text, zone)
    if dst_note:
        body.append(f"<p class='error' id='dst-note'>{e(dst_note)}</p>")
    if asked.year < 1971 or asked.year > 9000:
        raise pieces.PageError(400, f"at={text[:40]!r} is out of range (years 1971 to 9000)")
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
        head = f"{html.local(fate.at, zone)} is an occurrence of {pieces.schedule_words(d)}: {fate.note}."
        body.append(
            f"<div class='answer' id='answer' data-verdict='{e(answer.verdict)}'><p>{e(head)}</p>{_fate_runs(fate, zone, ctx.now)}</div>"
        )
    else:
        lead = f"Never scheduled: {pieces.schedule_words(d)} has no occurrence at {html.local(asked, zone)}."
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
    return pieces.Page(f"{d.key}: why didn't it run?", "".join(body))


def _fate_runs(fate: why.Fate, zone: ZoneInfo, now: datetime) -> str:
    if not fate.runs:
        return ""
    rows = [
        [
            link(pieces.run_url(run.id), run.id),
            e(run.attempt),
            pieces.trigger_badge(run.trigger),
            pieces.status_cell(run),
            e(run.error),
            pieces.duration(run, now),
        ]
        for run in fate.runs
    ]
    return html.table(["run", "attempt", "trigger", "status", "error", "duration"], rows)
