"""Per-tick leader election on a row of ``pgsched.leader_locks``.

Every replica runs the tick loop; at the start of each tick it *tries* to take the leader
row for its dedicated session. Trying never waits: if another live session holds the row,
this tick is a no-op. The row names the holding backend (pid and start time), so it stays
taken across the tick's several transactions (one per phase); it is released explicitly at
the end of the tick, so leadership moves freely between replicas. A holder whose backend is
gone — crashed, killed, or on a former primary after a failover — holds nothing, so a dead
leader's row is free at once; a frozen one's expires after ``hold_seconds``.

Why a row and not an advisory lock: any login may call ``pg_advisory_lock`` on any key,
and the keys held are visible to all in ``pg_locks``, so a job pod's login could hold the
leader key and stop every tick. Only roles with privileges on pgsched's tables can take
this row (docs/architecture.md, "Locks no tenant can take").

Leadership is an optimization, not a guarantee: a paused leader whose row expired can wake
up and finish its tick while another replica leads. Every claim and every state change is
therefore atomic on its own (SKIP LOCKED, xact locks, fenced updates).
"""

from __future__ import annotations

from pgsched.db import queries
from pgsched.db.connection import Connection

DEFAULT_LOCK_NAME = "pgsched:tick-leader"
# How long a frozen leader keeps the row (the tick passes its stall bound).
DEFAULT_HOLD_SECONDS = 30.0


def try_lead(
    conn: Connection,
    *,
    lock_name: str = DEFAULT_LOCK_NAME,
    hold_seconds: float = DEFAULT_HOLD_SECONDS,
) -> bool:
    row = conn.execute(
        queries.get("try_lead"), {"lock_name": lock_name, "hold_seconds": hold_seconds}
    ).fetchone()
    return bool(row and row["leader"])


def stop_leading(conn: Connection, *, lock_name: str = DEFAULT_LOCK_NAME) -> bool:
    row = conn.execute(queries.get("stop_leading"), {"lock_name": lock_name}).fetchone()
    return bool(row and row["released"])
