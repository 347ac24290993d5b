"""Telling the reaper the run API is served: a periodic stamp (``run_once``).

Pods beat through the API, so while no replica serves it no run can beat; the reaper
counts silence only from when it was available again (``pgsched.silent_since``,
migration 0039). Each serving replica stamps every :data:`INTERVAL_SECONDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pgsched.db import clock, queries
from pgsched.db.connection import Connection
from pgsched.engine.reap import RUN_API_GAP

# Four stamps within the gap the reaper allows, so a slow commit or two is no gap.
INTERVAL_SECONDS = RUN_API_GAP.total_seconds() / 4


@dataclass(frozen=True)
class PresenceResult:
    available_since: datetime
    seen_at: datetime


def run_once(conn: Connection, *, now: datetime | None = None) -> PresenceResult:
    """Stamp at ``now``: the engine's clock (None: the database's), as the reaper reads it."""
    at = clock.now(conn, now)
    row = conn.execute(queries.get("stamp_presence"), {"gap": RUN_API_GAP, "now": at}).fetchone()
    assert row is not None
    return PresenceResult(row["available_since"], row["seen_at"])
