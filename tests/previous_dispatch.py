"""The claim as the release before migration 0005 ran it: several statements, client-side
choice, the 0004 lock-and-count functions.

During a rolling upgrade a replica of that release may still dispatch next to upgraded
ones on the migrated schema. Its statements are kept here verbatim (the ``Queue`` policy
path, which is all the race needs) so a test can race the two versions against each other
and check that caps still hold: both take the same advisory-lock keys in the same order.
"""

from __future__ import annotations

from typing import Any, LiteralString
from uuid import UUID

from pgsched.db.connection import Connection
from pgsched.engine.models import Run

CANDIDATES: LiteralString = """
SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
FROM pgsched.job_runs AS r
WHERE r.status = 'QUEUED'
  AND r.scheduled_for <= now()
  AND (r.deadline_at IS NULL OR r.deadline_at > now())
ORDER BY r.scheduled_for, r.id
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED
"""
LOCK_AND_COUNT: LiteralString = (
    "SELECT * FROM pgsched.lock_and_count_for_dispatch(%(definition_ids)s::uuid[])"
)
TRY_LOCK_AND_COUNT: LiteralString = (
    "SELECT * FROM pgsched.try_lock_and_count_for_dispatch(%(definition_ids)s::uuid[])"
)
CLAIM: LiteralString = """
UPDATE pgsched.job_runs
SET status = 'RUNNING', started_at = clock_timestamp(), lease_token = gen_random_uuid()
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'QUEUED'
RETURNING *
"""


def claim(conn: Connection, batch_size: int, overshoot: int = 4) -> list[Run]:
    with conn.transaction():
        candidates = conn.execute(CANDIDATES, {"limit": batch_size * overshoot}).fetchall()
        if not candidates:
            return []
        first = _definitions_of(candidates[:batch_size])
        room = _room(conn, LOCK_AND_COUNT, first)
        rest = [d for d in _definitions_of(candidates) if d not in room]
        if rest and takeable(candidates, room) < batch_size:
            room |= _room(conn, TRY_LOCK_AND_COUNT, rest)
        chosen: list[int] = []
        for row in candidates:
            left = room.get(row["definition_id"], 0)
            if left > 0 and len(chosen) < batch_size:
                room[row["definition_id"]] = left - 1
                chosen.append(row["id"])
        if not chosen:
            return []
        return [Run.from_row(row) for row in conn.execute(CLAIM, {"ids": chosen})]


def _definitions_of(candidates: list[dict[str, Any]]) -> list[UUID]:
    return list(dict.fromkeys(row["definition_id"] for row in candidates))


def _room(conn: Connection, query: LiteralString, definition_ids: list[UUID]) -> dict[UUID, int]:
    rows = conn.execute(query, {"definition_ids": definition_ids})
    return {
        row["id"]: max(0, row["max_concurrent_runs"] - row["running"])
        for row in rows
        if not row["deleted"]
    }


def takeable(candidates: list[dict[str, Any]], room: dict[UUID, int]) -> int:
    """How many of ``candidates`` (in queue order) the free slots in ``room`` would take."""
    left = dict(room)
    taken = 0
    for row in candidates:
        if left.get(row["definition_id"], 0) > 0:
            left[row["definition_id"]] -= 1
            taken += 1
    return taken
