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

Silence is not death (I8). When the launcher keeps outcomes outside the database
(``await_verdicts``: the Kubernetes launcher, whose Jobs record how their pods ended), a
silent run may have *succeeded* while nobody could see it — the API server was down when
its Job finished, and its sidecar ended with the pod. Failing it ``HeartbeatLost`` would
retry succeeded work. So the two silence signatures, for runs with a launched workload,
only mark the run ``outcome_pending_at`` (signature ``outcome_pending``; the run stays
``RUNNING``, and so keeps counting against its caps) and the launcher's side settles it
from the workload's own record (``pgsched.k8s.jobside.verdicts``). A pending run whose heartbeat
comes back is no longer pending (``heartbeat_resumed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pgsched.db import clock, queries
from pgsched.db.connection import Connection

_SILENCE = {
    "heartbeat_lost": "reap_stale_heartbeats",
    "orphaned": "reap_never_heartbeated",
}
_AWAITING_VERDICTS = {
    "outcome_pending": "await_verdicts_of_silent_runs",
    "heartbeat_resumed": "clear_resumed_verdicts",
}
_SIGNATURES = {
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


def run_once(
    conn: Connection, *, now: datetime | None = None, await_verdicts: bool = False
) -> ReapResult:
    """One pass of every signature; ``await_verdicts``: see the module docstring."""
    found: dict[str, list[int]] = {}
    silence = _AWAITING_VERDICTS if await_verdicts else {}
    with conn.transaction():
        at = clock.now(conn, now)
        # The signatures' statements in one round trip (psycopg's pipeline mode): the
        # server runs them in this order, in this transaction, as one at a time would;
        # an idle tick waits for the network once here, not once per signature.
        with conn.pipeline():
            answers = {
                signature: conn.execute(queries.get(query), {"now": at})
                for signature, query in {**silence, **_SILENCE, **_SIGNATURES}.items()
            }
        for signature, answer in answers.items():
            found[signature] = [row["id"] for row in answer.fetchall()]
    return ReapResult(found)
