"""The Run API's reads: pages of runs by keyset, one run, the namespaces that have any, and
the changes a watch follows (``changes`` module: their order).

Paging is by run id (newest first): the continue token is the last id a page gave, so a
page costs the same at the end of ten million runs as at the start, and runs that arrive
while a client pages never shift what it has not read yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from pgsched.db import clock, queries
from pgsched.engine import run_description, run_json
from pgsched.engine.models import Run
from pgsched.k8s.runs_api.resources import TOKEN_PREFIX, StoredRun, run_id_of

# The largest run id PostgreSQL's bigint holds: "before" on a first page.
_NO_BOUND = 2**63 - 1


@dataclass(frozen=True)
class Page:
    runs: list[StoredRun]
    next_before: int | None  # the continue token's run id, None on the last page


@dataclass(frozen=True)
class Change:
    seq: int  # its place in the watch order: a resourceVersion
    run_id: int
    status: str  # the run's status the change made, or a note (LAUNCHING, STARTED, ...)
    reason: str | None
    created: bool  # the run's creation
    # The status a status change left; None for a creation, a note, or a change recorded
    # before the database kept it.
    previous: str | None = None


@dataclass(frozen=True)
class Versions:
    current: int  # the last place given: a list's resourceVersion
    pruned_through: int  # a watch from at or below this one is 410 Gone


class RunReader:
    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self._pool = pool

    def page(
        self,
        *,
        namespaces: list[str] | None,
        scheduled_job: str | None,
        statuses: list[str] | None,
        before: int | None,
        limit: int,
    ) -> Page:
        with self._pool.connection() as conn:
            rows = conn.execute(
                queries.get("runs_api_page"),
                {
                    "namespaces": namespaces,
                    "scheduled_job": scheduled_job,
                    "statuses": statuses,
                    "before": _NO_BOUND if before is None else before,
                    "limit": limit + 1,  # one more says whether another page follows
                },
            ).fetchall()
        found = [_stored(row) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(found, found[-1].run.id if more and found else None)

    def one(self, namespace: str, run_id: int) -> StoredRun | None:
        found = self.by_ids([run_id]).get(run_id)
        return found if found is not None and found.namespace == namespace else None

    def described(self, run_id: int) -> dict[str, Any] | None:
        """What ``pgsched describe`` says of the run, as JSON: its ``-o json`` document and
        its ``lines``, at the database's now, as the CLI reading the database says it."""
        with self._pool.connection() as conn:
            found = run_description.of_run(conn, run_id, now=clock.now(conn))
        if found is None:
            return None
        lines = run_description.lines_json(run_description.lines(found))
        return run_json.plain({**run_description.as_json(found), "lines": lines})  # type: ignore[no-any-return]

    def named(self, namespace: str, name: str) -> StoredRun | None:
        """The run ``name`` names in ``namespace``: one created under that name through the
        Run API, else the run whose Job's name it is."""
        with self._pool.connection() as conn:
            row = conn.execute(
                queries.get("runs_api_by_token"),
                {"namespace": namespace, "token": TOKEN_PREFIX + name},
            ).fetchone()
        if row:
            return _stored(row)
        run_id = run_id_of(name)
        found = self.one(namespace, run_id) if run_id is not None else None
        return found if found is not None and found.name == name else None

    def versions(self) -> Versions:
        with self._pool.connection() as conn:
            row = conn.execute(queries.get("runs_api_resource_version")).fetchone()
        assert row is not None  # one row, always
        return Versions(int(row["current"]), int(row["pruned_through"]))

    def changes(
        self,
        *,
        namespaces: list[str] | None,
        scheduled_job: str | None,
        after: int,
        limit: int,
    ) -> list[Change]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                queries.get("runs_api_changes"),
                {
                    "namespaces": namespaces,
                    "scheduled_job": scheduled_job,
                    "after": after,
                    "limit": limit,
                },
            ).fetchall()
        return [
            Change(
                row["seq"],
                row["run_id"],
                row["status"],
                row["reason"],
                row["created"],
                row["previous_status"],
            )
            for row in rows
        ]

    def by_ids(self, ids: list[int]) -> dict[int, StoredRun]:
        if not ids:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(queries.get("runs_api_by_ids"), {"ids": ids}).fetchall()
        found = [_stored(row) for row in rows]
        return {item.run.id: item for item in found}

    def namespaces(self) -> list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(queries.get("runs_api_namespaces")).fetchall()
        return [row["namespace"] for row in rows]


def _stored(row: dict[str, Any]) -> StoredRun:
    return StoredRun(
        row["namespace"],
        row["scheduled_job"],
        row["scheduled_job_deleted_at"],
        Run.from_row(row),
        row.get("requested_by"),
    )
