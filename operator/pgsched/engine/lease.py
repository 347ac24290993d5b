"""The job side of a run: heartbeat, lease state and finish, all fenced by the lease token.

A claim gives the run a fresh ``lease_token``. Every write from the job side names both the
run id and that token and requires ``status = 'RUNNING'``, so once a run was reaped,
cancelled or otherwise ended, its (possibly still alive) worker updates zero rows: it learns
it lost the lease and can stop, and it can never overwrite a terminal status (I4).

A lease carries a MAC over the run id under a key only the schema owner can read
(``sql/functions/lease_for.sql``), so the database recognises a genuine lease without the
row that stored it: a claim lost with a failover's commits is re-established by the job
side's next call (the run is QUEUED again: it becomes RUNNING with that lease, within its
limits), and the launcher that finds the run's Job under such a lease adopts it
(:func:`adopt`). A run RUNNING under another lease, or ended, is never taken over.

These calls go through SQL functions (``pgsched.heartbeat`` & co.), the same ones a job pod
calls with its narrow database role. Those take no time from the caller (a job could forge
it): the database clock stamps every write. A pinned ``now`` (tests, the engine's pinned
clock) selects the ``*_pinned`` variant, which only the schema owner may execute.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

from pgsched.db import queries
from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

LeaseState = Literal["active", "cancel_requested", "lost"]
FinalStatus = Literal["COMPLETED", "FAILED", "CANCELLED"]


@dataclass(frozen=True)
class Lease:
    run_id: int
    token: UUID


def _variant(query: str, now: datetime | None) -> str:
    return query if now is None else f"{query}_pinned"


def heartbeat(conn: Connection, lease: Lease, *, now: datetime | None = None) -> LeaseState:
    """Stamp ``heartbeat_at``; returns whether to go on, stop for cancel, or stop (lost)."""
    row = conn.execute(
        queries.get(_variant("heartbeat", now)),
        {"run_id": lease.run_id, "lease_token": lease.token, "now": now},
    ).fetchone()
    assert row is not None
    return row["state"]  # type: ignore[no-any-return]


def state(conn: Connection, lease: Lease) -> LeaseState:
    """Read-only check for a checkpoint: is the run still ours, and was cancel requested?"""
    row = conn.execute(
        queries.get("lease_state"), {"run_id": lease.run_id, "lease_token": lease.token}
    ).fetchone()
    assert row is not None
    return row["state"]  # type: ignore[no-any-return]


def workload_ended(conn: Connection, lease: Lease, *, now: datetime | None = None) -> bool:
    """Note that the run's workload ended, its outcome not recorded here (the heartbeat
    sidecar, on SIGTERM: the outcome is the Job's to tell). False: the lease was lost.

    A run that stops heartbeating after this is "ended, outcome pending", not "vanished"
    (see ``pgsched.k8s.jobside.verdicts``)."""
    row = conn.execute(
        queries.get(_variant("workload_ended", now)),
        {"run_id": lease.run_id, "lease_token": lease.token, "now": now},
    ).fetchone()
    return bool(row and row["marked"])


def adopt(conn: Connection, lease: Lease, earlier: UUID) -> bool:
    """Give the run ``earlier``, a lease of an earlier claim of it whose workload is still
    there (its Job), instead of ``lease``, the one it holds now. True when the database
    found ``earlier`` genuine for this run (it carries a MAC only the database can make,
    ``sql/functions/adopt_lease.sql``) and the run still RUNNING under ``lease``; otherwise
    nothing changes."""
    row = conn.execute(
        queries.get("adopt_lease"),
        {"run_id": lease.run_id, "lease_token": lease.token, "adopted": earlier},
    ).fetchone()
    return bool(row and row["adopted"])


def reestablish(conn: Connection, lease: Lease) -> bool:
    """Take back a claim the database lost: the run, QUEUED, becomes RUNNING under
    ``lease`` if that lease is genuine for it (``sql/functions/reestablish_claim.sql``) and
    its definition and pool have room, as the job side's own calls would do. False: nothing
    changed."""
    row = conn.execute(
        queries.get("reestablish_claim"), {"run_id": lease.run_id, "lease_token": lease.token}
    ).fetchone()
    return bool(row and row["reestablished"])


def listen(conn: Connection, lease: Lease) -> LeaseState:
    """Subscribe ``conn`` (autocommit) to the run's cancel notifications; returns the state.

    The database notifies the lease holder's channel (derived from the token, so only the
    holder can know it; the payload is empty) when the run is asked to stop or stops
    running: the caller then reads the state again. Nothing is subscribed if lost."""
    row = conn.execute(
        queries.get("listen_for_cancel"), {"run_id": lease.run_id, "lease_token": lease.token}
    ).fetchone()
    assert row is not None
    return row["state"]  # type: ignore[no-any-return]


def finish(
    conn: Connection,
    lease: Lease,
    status: FinalStatus,
    *,
    reason: str | None = None,
    error: str | None = None,
    exit_code: int | None = None,
    retry_hint: Literal["retry", "never"] | None = None,
    now: datetime | None = None,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log,
    lost_level: int = logging.WARNING,
) -> bool:
    """Record the run's outcome. False means the lease was lost: nothing was changed.

    ``logger`` is the caller's run logger (``logs.for_run``), so the line about a lost
    lease carries the run's context fields like the caller's own lines. ``lost_level`` is
    that line's level: the operator's replicas all watch the same Jobs and race to record
    each outcome, so for them losing is routine (``outcomes.write`` passes DEBUG)."""
    row = conn.execute(
        queries.get(_variant("finish_run", now)),
        {
            "run_id": lease.run_id,
            "lease_token": lease.token,
            "status": status,
            "reason": reason,
            "error": error,
            "exit_code": exit_code,
            "retry_hint": retry_hint,
            "now": now,
        },
    ).fetchone()
    finished = bool(row and row["finished"])
    if not finished:
        logger.log(
            lost_level,
            "run %s: lease lost, %s not recorded (the run was already ended elsewhere)",
            lease.run_id,
            status,
        )
    return finished
