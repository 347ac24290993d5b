"""What every page shares: its context, its errors, the checks of its parameters and of
access, and the small renderers (links, badges, a run's status cell).

Each page is a plain function of a :class:`Context` and the request's parameters that
returns the page body or raises :class:`PageError` (a 4xx with a message saying what was
wrong and what would be right). Pages only read: nothing a visitor sends changes anything.
Access is checked before anything is looked up, so a 403 says nothing about what exists:
a namespace's pages answer 403 to a visitor who may not ``get scheduledjobs`` there, also
for a job that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from pgsched import wording
from pgsched.db.connection import Connection
from pgsched.engine import definitions, starts
from pgsched.engine.models import Definition, Run, Start
from pgsched.schedule import ScheduleError, zones
from pgsched.ui import access as acl
from pgsched.ui import html, words
from pgsched.ui.html import e

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


def only(query: Mapping[str, str], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise PageError(400, f"unknown parameter {unknown[0]!r}; this page takes: {known}")


def text(query: Mapping[str, str], key: str) -> str | None:
    value = query.get(key, "").strip()
    if len(value) > _MAX_TEXT or "\x00" in value:
        raise PageError(400, f"{key}: at most {_MAX_TEXT} printable characters")
    return value or None


def number(
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


def allowed(ctx: Context, namespace: str) -> None:
    if not ctx.access.allows(ctx.user, namespace):
        raise PageError(403, f"you may not get scheduledjobs in namespace {namespace!r}")


def definition(ctx: Context, namespace: str, name: str) -> Definition:
    allowed(ctx, namespace)
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


def zone_of(definition: Definition) -> ZoneInfo:
    try:
        return zones.load_zone(definition.time_zone)
    except ScheduleError:
        return ZoneInfo("UTC")


def health_badge(definition: Definition, health: str, refusal: starts.Refusal | None = None) -> str:
    """``refusal``: the job cannot start (``starts.refusal``); said in the Ready
    condition's words, unless it is rejected or suspended, which say more."""
    if refusal is not None and health in ("ready", "failing"):
        words = starts.refused_message(refusal, definition.generation)
        return f"<span class='badge failing'>Cannot start</span> {e(refusal.reason)}: {e(words)}"
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


def health_of(definition: Definition) -> str:
    """The overview query's ``health`` column (ui.sql), for one definition."""
    if definition.rejected_generation is not None:
        return "rejected"
    if definition.is_suspended:
        return "suspended"
    return "failing" if definition.consecutive_failures > 0 else "ready"


def trigger_badge(trigger: str) -> str:
    return f"<span class='trigger trigger-{e(trigger)}'>{e(trigger)}</span>"


def status_cell(run: Run, start: Start | None = None) -> str:
    reason = f"/{run.reason}" if run.reason else ""
    shown = starts.shown_status(run, start)
    return f"<span class='cell {e(run.status)}'></span> {e(shown)}{e(reason) if reason else ''}"


def duration(run: Run, now: datetime) -> str:
    if run.started_at is None:
        return html.NOTHING
    return html.duration((run.finished_at or now) - run.started_at)


def schedule_words(definition: Definition) -> str:
    return words.describe(definition.schedule_kind, definition.schedule, definition.time_zone)
