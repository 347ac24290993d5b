"""What the UI reads from the database (``sql/queries/ui.sql``), as frozen rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import starts
from pgsched.engine.models import Definition, Run


@dataclass(frozen=True)
class Cell:
    """One run in an overview strip."""

    id: int
    status: str
    reason: str | None
    trigger: str
    attempt: int
    scheduled_for: datetime


@dataclass(frozen=True)
class Row:
    """One ScheduledJob in the overview."""

    definition: Definition
    health: str
    queued: int
    active: int
    strip: tuple[Cell, ...]
    refusal: starts.Refusal | None  # why it cannot start, if it cannot


def namespaces(conn: Connection) -> list[str]:
    return [row["namespace"] for row in conn.execute(queries.get("ui_namespaces")).fetchall()]


def overview(
    conn: Connection,
    *,
    namespaces: Sequence[str],
    name: str | None,
    health: str | None,
    after: tuple[str, str],
    limit: int,
    strip: int,
) -> list[Row]:
    rows = conn.execute(
        queries.get("ui_overview"),
        {
            "namespaces": list(namespaces),
            "name": name,
            "health": health,
            "after_namespace": after[0],
            "after_name": after[1],
            "limit": limit,
            "strip": strip,
            "cannot_start": starts.REASONS_CANNOT_START,
        },
    ).fetchall()
    return [_row(row) for row in rows]


def _row(row: dict[str, Any]) -> Row:
    cells = tuple(
        Cell(
            id=item["id"],
            status=item["status"],
            reason=item["reason"],
            trigger=item["trigger"],
            attempt=item["attempt"],
            scheduled_for=datetime.fromisoformat(item["scheduled_for"]),
        )
        for item in row["strip"]
    )
    return Row(
        Definition.from_row(row),
        row["health"],
        row["queued"],
        row["active"],
        cells,
        starts.refusal_in(row),
    )


def runs_before(
    conn: Connection, definition_id: UUID, *, before: int | None, limit: int
) -> list[Run]:
    rows = conn.execute(
        queries.get("ui_runs_before"),
        {"definition_id": definition_id, "before": before, "limit": limit},
    ).fetchall()
    return [Run.from_row(row) for row in rows]


def occurrence_runs(
    conn: Connection, definition_id: UUID, instants: Sequence[datetime]
) -> list[Run]:
    rows = conn.execute(
        queries.get("ui_occurrence_runs"),
        {"definition_id": definition_id, "instants": list(instants)},
    ).fetchall()
    return [Run.from_row(row) for row in rows]
