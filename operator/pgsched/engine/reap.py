"""The reaper: runs whose worker is gone, and runs that can no longer start in time.

Each signature (stale heartbeat, never heartbeated, cancellation ignored, active deadline
passed, starting deadline missed) is one set-based UPDATE (``sql/queries/reap.sql``),
fenced on the status it expects, so reaping a thousand orphans is a handful of statements,
not a thousand round trips. Failed runs are then retried (or not) by ``settle``, in the
same tick.

Silence is not death (I8): when the launcher keeps outcomes outside the database (the
Kubernetes launcher, ``await_verdicts``), a silent run may have succeeded unseen, so the
silence signatures only mark it ``outcome_pending_at`` and the launcher's side settles it
from its Job (``pgsched.k8s.jobside.verdicts``).

Runs claimed but never launched (their claimant stopped between the claim and the record
of its launch) are not reaped but found (``relaunch_after``): the tick launches them again
under their lease, in the same tick's dispatch.

The signatures: docs/architecture.md, "The reaper's signatures".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pgsched.db import clock, queries
from pgsched.db.connection import Connection
from pgsched.engine.models import Run

# At most this many unlaunched claims are read per tick (the rest, the next tick).
RELAUNCH_LIMIT = 50
# A run API presence older than this means no replica serves it now (a replica stamps
# every runapi.presence.INTERVAL_SECONDS; this allows two missed stamps and slow commits).
RUN_API_GAP = timedelta(seconds=10)

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
    # Claimed over ``relaunch_after`` ago and never launched: for dispatch to launch again.
    unlaunched: tuple[Run, ...] = ()

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.run_ids.values())

    def count(self, signature: str) -> int:
        return len(self.run_ids.get(signature, []))


def run_once(
    conn: Connection,
    *,
    now: datetime | None = None,
    await_verdicts: bool = False,
    relaunch_after: timedelta | None = None,
) -> ReapResult:
    """One pass of every signature; ``await_verdicts``: see the module docstring.
    ``relaunch_after``: also find the runs claimed longer ago than that and never launched
    (``ReapResult.unlaunched``); only for a launcher that records every launch it makes."""
    found: dict[str, list[int]] = {}
    silence = _AWAITING_VERDICTS if await_verdicts else {}
    with conn.transaction():
        params = {
            "now": clock.now(conn, now),
            "api_gap": RUN_API_GAP,
            "relaunch_after": relaunch_after,
            "relaunch_limit": RELAUNCH_LIMIT,
        }
        # The signatures' statements in one round trip (psycopg's pipeline mode): the
        # server runs them in this order, in this transaction, as one at a time would;
        # an idle tick waits for the network once here, not once per signature.
        with conn.pipeline():
            answers = {
                signature: conn.execute(queries.get(query), params)
                for signature, query in {**silence, **_SILENCE, **_SIGNATURES}.items()
            }
            unlaunched = (
                conn.execute(queries.get("unlaunched_claims"), params)
                if relaunch_after is not None
                else None
            )
        for signature, answer in answers.items():
            found[signature] = [row["id"] for row in answer.fetchall()]
        claims = () if unlaunched is None else tuple(map(Run.from_row, unlaunched.fetchall()))
    return ReapResult(found, claims)
