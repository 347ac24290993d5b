"""Concurrency pools: a limit on RUNNING runs shared by every job that names the pool.

The limit itself is enforced by the claim (``sql/functions/claim_for_dispatch.sql``
and ``engine/dispatch.py``); this module keeps the pools' limits in ``job_pools`` and reads
what a pool is doing, for its status and metrics. A job may name a pool that does not
exist (yet, or any more): its runs wait until the pool is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine.models import Definition


@dataclass(frozen=True)
class PoolStats:
    namespace: str
    name: str
    limit: int | None  # None: no such pool, though jobs name it
    running: int
    queued: int
    jobs: int


def upsert(
    conn: Connection, namespace: str, name: str, limit: int, *, now: datetime | None = None
) -> None:
    """Store (or change) a pool's limit; the next claim counts against it."""
    conn.execute(
        queries.get("upsert_pool"),
        {"namespace": namespace, "name": name, "limit": limit, "now": now},
    )


def delete(conn: Connection, namespace: str, name: str) -> None:
    """Forget a pool: the jobs that still name it keep their runs QUEUED."""
    conn.execute(queries.get("delete_pool"), {"namespace": namespace, "name": name})


def exists(conn: Connection, namespace: str, name: str) -> bool:
    return limit_of(conn, namespace, name) is not None


def found_for(conn: Connection, definition: Definition) -> bool:
    """Whether the pool a job's spec.pool names exists (True for a job without one)."""
    pool = definition.spec.get("pool")
    return not isinstance(pool, str) or exists(conn, definition.namespace, pool)


def limit_of(conn: Connection, namespace: str, name: str) -> int | None:
    """A pool's stored limit; None if it does not exist."""
    row = conn.execute(queries.get("pool_limit"), {"namespace": namespace, "name": name}).fetchone()
    return int(row["concurrency_limit"]) if row else None


def members(conn: Connection, namespace: str, name: str) -> list[UUID]:
    """The live definitions that name the pool."""
    rows = conn.execute(queries.get("definitions_in_pool"), {"namespace": namespace, "name": name})
    return [row["id"] for row in rows]


def request_member_refresh(conn: Connection, namespace: str, name: str) -> None:
    """Ask for the members' statuses to be rendered again once this transaction commits
    (their PoolReady condition follows the pool's existence)."""
    conn.execute(queries.get("request_member_refresh"), {"namespace": namespace, "name": name})


def member_refresh_requested(conn: Connection, namespace: str, name: str) -> int | None:
    """The pending request to refresh the pool's members (its mark), or None."""
    row = conn.execute(
        queries.get("member_refresh_requested"), {"namespace": namespace, "name": name}
    ).fetchone()
    return int(row["requested"]) if row else None


def forget_member_refresh(conn: Connection, namespace: str, name: str, requested: int) -> None:
    """The members were refreshed for ``requested``; a newer request stays."""
    conn.execute(
        queries.get("forget_member_refresh"),
        {"namespace": namespace, "name": name, "requested": requested},
    )


def stats(conn: Connection, *, now: datetime | None = None) -> list[PoolStats]:
    """Every pool that exists or is named by a live job, with its counts."""
    return [PoolStats(**row) for row in conn.execute(queries.get("pool_stats"), {"now": now})]
