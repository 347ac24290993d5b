"""The reaper: runs whose worker is gone, and runs that can no longer start in time.

Each signature is one set-based UPDATE (see ``sql/queries/reap.sql``), fenced on the status
it expects, so reaping a thousand orphans is five statements, not a thousand round trips:

- stale heartbeat: ``heartbeat_at`` older than ``heartbeat.timeoutSeconds`` → ``FAILED/HeartbeatLost``;
- never heartbeated: no heartbeat ``heartbeat.orphanTimeoutSeconds`` after the claim →
  ``FAILED/Orphaned`` (the worker died before its first beat; this window is generous on
  purpose, a slow image pull looks exactly like a dead pod from here);
- cancellation ignored for ``cancelGraceSeconds`` → ``CANCELLED``;
- running longer than ``activeDeadlineSeconds`` → ``FAILED/DeadlineExceeded``;
- still QUEUED at its starting deadline → ``SKIPPED/DeadlineMissed``.

Failed runs are then retried (or not) by ``settle``, in the same tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pgsched.db import clock, queries
from pgsched.db.connection import Connection

_SIGNATURES = {
    "heartbeat_lost": "reap_stale_heartbeats",
    "orphaned": "reap_never_heartbeated",
    "cancel_ignored": "reap_ignored_cancellations",
    "deadline_exceeded": "reap_active_deadline",
    "deadline_missed": "skip_missed_deadlines",
}


@dataclass(frozen=True)
class ReapResult:
    run_ids: dict[str, list[int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.run_ids.values())

    def count(self, signature: str) -> int:
        return len(self.run_ids.get(signature, []))


def run_once(conn: Connection, *, now: datetime | None = None) -> ReapResult:
    found: dict[str, list[int]] = {}
    with conn.transaction():
        at = clock.now(conn, now)
        for signature, query in _SIGNATURES.items():
            rows = conn.execute(queries.get(query), {"now": at}).fetchall()
            found[signature] = [row["id"] for row in rows]
    return ReapResult(found)
