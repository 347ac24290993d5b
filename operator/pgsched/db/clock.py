""" "Now", as the engine sees it: the database clock, unless a test pinned it.

Every replica and job pod compares timestamps written by the database, so the database
clock is the only one that cannot disagree with itself. Functions that depend on time take
``now: datetime | None``; ``None`` means "ask the database". SQL does the same with one
idiom, ``coalesce(%(now)s::timestamptz, now())``; ``now()`` below is that expression, for
Python that needs the value itself (to compute occurrences, or a backoff).

``local()`` is this machine's clock, the only one pgsched reads outside the database, for
what is about this machine alone: the doctor's clock-skew check, the tick's estimate of
the database clock between ticks, the timestamp in the cancel file a workload reads,
``pgsched next`` without a database, and the admission webhook's "is this runAt in the
past" (it has no database; the controller asks the database again). No other module reads the wall clock
(``tests/unit/test_one_clock.py`` fails if one does).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pgsched.db import queries

if TYPE_CHECKING:
    from pgsched.db.connection import Connection


def now(conn: Connection, pinned: datetime | None = None) -> datetime:
    if pinned is not None:
        return pinned
    row = conn.execute(queries.get("database_now"), {"now": pinned}).fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


def local() -> datetime:
    """This machine's wall clock (UTC): never for what the database records or decides."""
    return datetime.now(UTC)
