"""Calendars in the database: their resolved forms, and which jobs exclude them.

A Calendar resource is stored by its controller (``k8s/kinds/calendars.py``) in its resolved
form (``schedule.calendars.resolve``); this module keeps it in ``pgsched.calendars`` and
loads, for a job, the calendars its ``spec.calendars.exclude`` names — those found, and
the names of those missing (a condition on the job, never a silent no-op). A missing
calendar excludes nothing: the job's occurrences run, and its ``CalendarsReady``
condition says why they are not checked against it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched.db import queries
from pgsched.engine.models import Definition
from pgsched.schedule import calendars as calendar_days

if TYPE_CHECKING:  # `pgsched next --cron` imports this module and must not load psycopg
    from pgsched.db.connection import Connection


def excluded_names(definition: Definition) -> tuple[str, ...]:
    """The Calendar names a stored definition's spec excludes, in its order."""
    section = definition.spec.get("calendars")
    names = section.get("exclude") if isinstance(section, Mapping) else None
    return tuple(name for name in names if isinstance(name, str)) if isinstance(names, list) else ()


def upsert(
    conn: Connection,
    namespace: str,
    name: str,
    resolved: Mapping[str, Any],
    *,
    now: datetime | None = None,
) -> bool:
    """Store a calendar's resolved form; True if it changed (or is new)."""
    row = conn.execute(
        queries.get("upsert_calendar"),
        {"namespace": namespace, "name": name, "resolved": json.dumps(resolved), "now": now},
    ).fetchone()
    return row is not None


def delete(conn: Connection, namespace: str, name: str) -> bool:
    """Forget a calendar; True if it was stored."""
    row = conn.execute(
        queries.get("delete_calendar"), {"namespace": namespace, "name": name}
    ).fetchone()
    return row is not None


def members(conn: Connection, namespace: str, name: str) -> list[UUID]:
    """The live jobs that exclude the calendar."""
    rows = conn.execute(queries.get("calendar_members"), {"namespace": namespace, "name": name})
    return [row["id"] for row in rows]


def load(conn: Connection, definition: Definition) -> calendar_days.Calendars:
    """The calendars the definition excludes: those stored, and the names of the others."""
    return load_many(conn, [definition]).get(definition.id, calendar_days.NO_CALENDARS)


def load_many(conn: Connection, found: Iterable[Definition]) -> dict[UUID, calendar_days.Calendars]:
    """``load`` for several definitions, one query per namespace that has calendars
    (the tick's batch); definitions that exclude none are left out."""
    wanted = {item.id: (item.namespace, excluded_names(item)) for item in found}
    by_namespace: dict[str, set[str]] = {}
    for namespace, excluded in wanted.values():
        if excluded:
            by_namespace.setdefault(namespace, set()).update(excluded)
    stored: dict[tuple[str, str], calendar_days.Calendar] = {}
    for namespace, names in by_namespace.items():
        rows = conn.execute(
            queries.get("calendars_by_names"), {"namespace": namespace, "names": sorted(names)}
        )
        for row in rows:
            stored[namespace, row["name"]] = calendar_days.from_resolved(
                row["name"], row["resolved"]
            )
    return {
        definition_id: calendar_days.Calendars(
            found=tuple(stored[namespace, name] for name in names if (namespace, name) in stored),
            missing=tuple(name for name in names if (namespace, name) not in stored),
        )
        for definition_id, (namespace, names) in wanted.items()
        if names
    }
