"""Calendars in the database: their resolved forms, and which jobs exclude them.

A Calendar resource is stored by its controller (``k8s/kinds/calendars.py``) in its resolved
form (``schedule.calendars.resolve``); this module keeps it in ``pgsched.calendars`` and
loads, for a job, the calendars its ``spec.calendars.exclude`` names — those found, and
the names of those missing (a condition on the job, never a silent no-op). A missing
calendar excludes nothing: the job's occurrences run, and its ``CalendarsReady``
condition says why they are not checked against it.

A loaded Calendar keeps the days its rules cover, expanded a year at a time; the tick, the
publisher's status renders and the UI load calendars again and again, so loaded ones are
kept by their resolved form's digest (:class:`_Kept`): a Calendar's rules are expanded
once per year and process, not once per status render, whatever a tenant wrote.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched.db import queries
from pgsched.engine.models import Definition
from pgsched.schedule import calendars as calendar_days

if TYPE_CHECKING:  # `pgsched next --cron` imports this module and must not load psycopg
    from pgsched.db.connection import Connection


# Loaded calendars kept (each a few kB, plus its expanded years' ranges).
KEPT = 512


class _Kept:
    """Calendars by (namespace, name, digest of the resolved form), least recently used
    forgotten first; shared by every thread of the process."""

    def __init__(self, size: int = KEPT) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str, str], calendar_days.Calendar] = OrderedDict()

    def get(self, namespace: str, row: Mapping[str, Any]) -> calendar_days.Calendar:
        key = (namespace, str(row["name"]), str(row["digest"]))
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        found = calendar_days.from_resolved(row["name"], row["resolved"])
        with self._lock:
            self._items[key] = found
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return found


_KEPT = _Kept()


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
            stored[namespace, row["name"]] = _KEPT.get(namespace, row)
    return {
        definition_id: calendar_days.Calendars(
            found=tuple(stored[namespace, name] for name in names if (namespace, name) in stored),
            missing=tuple(name for name in names if (namespace, name) not in stored),
        )
        for definition_id, (namespace, names) in wanted.items()
        if names
    }
