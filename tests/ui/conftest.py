"""Fixtures for the web UI: a served UI over a real database, and a seeded history.

The history is planted from the test side, as rows the engine writes (a completed run,
a skipped occurrence with its reason, a failed attempt and its retry, a manual run), at
the 09:00 Europe/Sofia occurrences of the last days, relative to the database clock.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from factories import define
from pgsched.db import connection
from pgsched.engine.models import Definition
from pgsched.ui import access, server

SOFIA = ZoneInfo("Europe/Sofia")


@dataclass(frozen=True)
class Served:
    url: str

    def get(self, path: str, *, token: str | None = None) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def serve(dsn: str, ui_access: access.Access) -> Iterator[Served]:
    pool = server.open_pool(dsn, size=2)
    running = server.serve_in_thread(server.build_app(pool, ui_access, workers=2), "127.0.0.1:0")
    try:
        yield Served(f"http://127.0.0.1:{running.port}")
    finally:
        running.stop()
        pool.close()


@pytest.fixture
def ui(dsn: str) -> Iterator[Served]:
    """The UI over this test's database, database-only (--no-auth)."""
    yield from serve(dsn, access.OpenAccess())


@dataclass(frozen=True)
class History:
    definition: Definition
    completed: datetime  # the occurrence that ran
    skipped: datetime  # the occurrence skipped (DeadlineMissed)
    retried: datetime  # the occurrence that failed once and was retried
    ids: dict[str, int]


def insert_run(conn: connection.Connection, definition: Definition, **fields: Any) -> int:
    columns = {"definition_id": definition.id, "trigger": "schedule", **fields}
    names = ", ".join(columns)
    values = ", ".join(f"%({key})s" for key in columns)
    row = conn.execute(
        f"INSERT INTO pgsched.job_runs ({names}) VALUES ({values}) RETURNING id",  # type: ignore[arg-type]
        columns,
    ).fetchone()
    assert row is not None
    return int(row["id"])


def seed(
    conn: connection.Connection, *, namespace: str = "team-a", name: str = "report"
) -> History:
    """A daily 09:00 Europe/Sofia job with three days of history."""
    now: datetime = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
    today = now.astimezone(SOFIA).date()
    nine = [
        datetime(day.year, day.month, day.day, 9, 0, tzinfo=SOFIA)
        for day in (today - timedelta(days=n) for n in (3, 2, 1))
    ]
    definition = define(
        conn,
        name,
        namespace=namespace,
        now=now - timedelta(days=10),
        schedule="0 9 * * *",
        timeZone="Europe/Sofia",
    )
    ids: dict[str, int] = {}
    ran, skipped, retried = nine
    minute = timedelta(minutes=1)
    ids["failed"] = insert_run(
        conn,
        definition,
        status="FAILED",
        scheduled_for=retried,
        started_at=retried + minute,
        finished_at=retried + 3 * minute,
        reason="BackoffLimitExceeded",
        error="exit code 3",
        exit_code=3,
        k8s_job_name=f"{name}-a1",
        settled_at=retried + 3 * minute,
    )
    ids["retry"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        trigger="retry",
        scheduled_for=retried,
        attempt=2,
        retry_of=ids["failed"],
        started_at=retried + 5 * minute,
        finished_at=retried + 9 * minute,
        reason="Succeeded",
        k8s_job_name=f"{name}-a2",
        settled_at=retried + 9 * minute,
    )
    ids["skipped"] = insert_run(
        conn,
        definition,
        status="SKIPPED",
        scheduled_for=skipped,
        reason="DeadlineMissed",
        finished_at=skipped + 2 * minute,
    )
    ids["completed"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        scheduled_for=ran,
        started_at=ran + minute,
        finished_at=ran + 20 * minute,
        reason="Succeeded",
        k8s_job_name=f"{name}-c1",
        settled_at=ran + 20 * minute,
    )
    ids["manual"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        trigger="manual",
        scheduled_for=ran + 3 * 60 * minute,
        request_token="ui-test",
        started_at=ran + 3 * 60 * minute,
        finished_at=ran + 3 * 60 * minute + 2 * minute,
        reason="Succeeded",
        settled_at=ran + 3 * 60 * minute + 2 * minute,
    )
    # What the materializer would have done by now: the next occurrence is tomorrow's.
    upcoming = datetime(today.year, today.month, today.day, 9, 0, tzinfo=SOFIA) + timedelta(days=1)
    conn.execute(
        "UPDATE pgsched.job_definitions SET next_run_at = %s, last_scheduled_for = %s"
        " WHERE id = %s",
        [upcoming, upcoming - timedelta(days=1), definition.id],
    )
    return History(definition, completed=ran, skipped=skipped, retried=retried, ids=ids)


@pytest.fixture
def history(conn: connection.Connection) -> History:
    return seed(conn)
