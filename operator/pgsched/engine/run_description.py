"""One run described for ``pgsched describe``, wherever it is read: from the database by
an administrator's CLI, or through the Run API by a tenant's (a Run got by name carries it
as ``status.description``). One function gathers it and one shapes it, so both ways print
the same lines and the same JSON (I13).

The lines are :mod:`run_facts`' (the UI's run page shows the same); as JSON each keeps its
kind (a time, a duration, a text), so a screen far from the database still prints times
in the ScheduledJob's zone and durations in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgsched.engine import definitions, run_facts, run_json, runs
from pgsched.engine.models import Run, Start
from pgsched.schedule import zones

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

# A line's value, its run references already words (``run 17``).
Plain = str | int | datetime | timedelta | None


@dataclass(frozen=True)
class Description:
    facts: run_facts.Facts
    upstream: Run | None  # the run whose end queued this one (spec.after), if any


def of_run(conn: Connection, run_id: int, *, now: datetime) -> Description | None:
    """Everything ``pgsched describe`` says of run ``run_id``; None if there is no such run."""
    found = runs.get(conn, run_id)
    if found is None:
        return None
    definition = definitions.get(conn, found.definition_id)
    assert definition is not None  # job_runs.definition_id is a foreign key
    zone = zones.load_zone(definition.time_zone)
    facts = run_facts.of_run(conn, found, definition, now=now, zone=zone)
    upstream = runs.get(conn, found.upstream_run_id) if found.upstream_run_id else None
    return Description(facts, upstream)


def as_json(description: Description) -> dict[str, Any]:
    """``pgsched describe -o json``: datetimes and durations as they are (the caller's
    encoder writes them, :func:`run_json.plain` for a JSON answer)."""
    facts = description.facts
    definition = facts.definition
    return {
        "run": run_json.summary(
            facts.run, facts.triggered, [item.run_id for item in facts.upstreams]
        ),
        "requestedBy": facts.requested_by,
        "scheduledJob": {
            "namespace": definition.namespace,
            "name": definition.name,
            "uid": definition.id,
            "timeZone": definition.time_zone,
            "deleted": definition.deleted_at is not None,
        },
        "retryChain": [run_json.summary(item) for item in facts.attempts],
        "upstreamRun": run_json.summary(description.upstream) if description.upstream else None,
        "upstreamRuns": [
            {"runId": item.run_id, "scheduledJob": item.scheduled_job, "status": item.status}
            for item in facts.upstreams
        ],
        "waitingFor": (
            {"reason": facts.wait.reason, "message": facts.wait.message} if facts.wait else None
        ),
        "start": _start_json(facts.start),
        "notifications": facts.notify.as_json() if facts.notify else None,
    }


def lines(description: Description) -> list[tuple[str, Plain]]:
    """The lines describe prints, in order, each value plain (run references as words)."""
    return [(label, run_facts.text(value)) for label, value in description.facts.lines]


def lines_json(items: list[tuple[str, Plain]]) -> list[dict[str, Any]]:
    """The lines as JSON, each value tagged with its kind: ``time`` (RFC 3339, UTC),
    ``seconds`` (a duration), ``number`` or ``text``; a line without a value has none."""
    shaped: list[dict[str, Any]] = []
    for label, value in items:
        line: dict[str, Any] = {"name": label}
        if isinstance(value, datetime):
            line["time"] = run_json.utc_iso(value)
        elif isinstance(value, timedelta):
            line["seconds"] = value.total_seconds()
        elif isinstance(value, int):
            line["number"] = value
        elif value is not None:
            line["text"] = value
        shaped.append(line)
    return shaped


def lines_from_json(shaped: list[dict[str, Any]]) -> list[tuple[str, Plain]]:
    """:func:`lines_json` read back."""
    items: list[tuple[str, Plain]] = []
    for line in shaped:
        value: Plain = None
        if line.get("time") is not None:
            value = run_json.from_utc_iso(str(line["time"]))
        elif line.get("seconds") is not None:
            value = timedelta(seconds=float(line["seconds"]))
        elif line.get("number") is not None:
            value = int(line["number"])
        elif line.get("text") is not None:
            value = str(line["text"])
        items.append((str(line["name"]), value))
    return items


def _start_json(start: Start | None) -> dict[str, Any] | None:
    if start is None:
        return None
    return {
        "workloadStartedAt": start.workload_started_at,
        "waitingReason": start.waiting_reason,
        "waitingMessage": start.waiting_message,
        "awaitingAdmission": start.awaiting_admission,
        "boundAt": start.bound_at,
    }
