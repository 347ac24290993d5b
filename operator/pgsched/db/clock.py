""" "Now", as the engine sees it: the database clock, unless a test pinned it.

Every replica and job pod compares timestamps written by the database, so the database
clock is the only one that cannot disagree with itself. Functions that depend on time take
``now: datetime | None``; ``None`` means "ask the database".
"""

from __future__ import annotations

from datetime import datetime

from pgsched.db import queries
from pgsched.db.connection import Connection


def now(conn: Connection, pinned: datetime | None = None) -> datetime:
    if pinned is not None:
        return pinned
    row = conn.execute(queries.get("database_now"), {"now": pinned}).fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]
