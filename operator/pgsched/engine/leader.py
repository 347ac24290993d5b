"""Per-tick leader election with a session-scoped ``pg_try_advisory_lock``.

Every replica runs the tick loop; at the start of each tick it *tries* the lock on its own
dedicated session. Trying never waits: if another replica holds it, this tick is a no-op.
The lock is session-scoped because a tick is several transactions (one per phase) and must
stay leader across all of them; it is released explicitly at the end of the tick, so
leadership moves freely between replicas and a dead leader's lock dies with its session.

Leadership is an optimization, not a guarantee: a paused leader whose session was killed
can wake up and finish its tick while another replica leads. Every claim and every state
change is therefore atomic on its own (SKIP LOCKED, advisory xact locks, fenced updates).
"""

from __future__ import annotations

from pgsched.db import queries
from pgsched.db.connection import Connection

DEFAULT_LOCK_NAME = "pgsched:tick-leader"


def try_lead(conn: Connection, *, lock_name: str = DEFAULT_LOCK_NAME) -> bool:
    row = conn.execute(queries.get("try_lead"), {"lock_name": lock_name}).fetchone()
    return bool(row and row["leader"])


def stop_leading(conn: Connection, *, lock_name: str = DEFAULT_LOCK_NAME) -> bool:
    row = conn.execute(queries.get("stop_leading"), {"lock_name": lock_name}).fetchone()
    return bool(row and row["released"])
