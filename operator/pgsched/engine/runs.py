"""Operations on runs that users trigger: run now, cancel, and reading history.

Run-now inserts a QUEUED row and nothing else: the run is claimed by the same dispatch
path as every scheduled run (caps, SKIP LOCKED, leases), never launched directly. A request
token makes it idempotent — the same token twice is one run, which is what lets the
operator retry an annotation event or a replica see it twice without doubling the run.

Cancellation is cooperative. A QUEUED run is cancelled at once (nothing is running); a
RUNNING one gets ``cancel_requested``; the database notifies the worker's heartbeat
(``sql/functions/notify_lease_holder.sql``), so it sees it at once rather than at its next
heartbeat or checkpoint. A worker that ignores it past ``cancelGraceSeconds`` is stopped by
the reaper.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from pgsched.db import queries
from pgsched.engine.models import Run

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

# Who asked a run to stop (job_runs.cancelled_by, shown by `pgsched describe`/`runs`, the
# RunCancelled Event and status.lastRun.cancelledBy). "Replace" is filled in by a trigger
# for the claim's concurrencyPolicy: Replace
# (sql/functions/name_replace_cancellations.sql); the others by the callers.
BY_REPLACE = "Replace"
BY_ANNOTATION = "Annotation"
BY_CLI = "CLI"
BY_DELETION = "Deletion"
BY_NAMESPACE_DELETION = "NamespaceDeletion"  # kubectl delete namespace
BY_RUN_API = "RunAPI"  # kubectl delete run (docs/runs-api.md)


class UnknownDefinition(LookupError):
    pass


def get(conn: Connection, run_id: int) -> Run | None:
    row = conn.execute(queries.get("run_by_id"), {"id": run_id}).fetchone()
    return Run.from_row(row) if row else None


def history(conn: Connection, definition_id: UUID, *, limit: int = 50) -> list[Run]:
    rows = conn.execute(
        queries.get("runs_of_definition"), {"definition_id": definition_id, "limit": limit}
    ).fetchall()
    return [Run.from_row(row) for row in rows]


# A request that named nobody: written by hand with kubectl, or before release 0.3.
UNKNOWN_REQUESTER = "unknown (the request named nobody; the API server's audit log has it)"
REQUESTED_TRIGGERS = ("manual", "backfill")


def requested_by(conn: Connection, run: Run) -> str | None:
    """Who asked for this run, as ``pgsched describe`` and the UI show it: the Kubernetes
    user the API server vouched for, ``CLI (user@host)`` for an administrator's
    ``--database``, or :data:`UNKNOWN_REQUESTER`; None for runs nobody asks for (the
    schedule's, retries, chained runs). Stored in ``pgsched.run_requesters``."""
    if run.trigger not in REQUESTED_TRIGGERS:
        return None
    row = conn.execute(queries.get("run_requester"), {"id": run.id}).fetchone()
    return str(row["requested_by"]) if row else UNKNOWN_REQUESTER


@dataclass(frozen=True)
class Enqueued:
    run: Run
    created: bool  # False when the token was used before: the earlier run is returned


def run_now(
    conn: Connection,
    definition_id: UUID,
    *,
    token: str,
    trigger: str = "manual",
    scheduled_for: datetime | None = None,
    requested_by: str | None = None,
    parameters: Mapping[str, str] | None = None,
) -> Enqueued:
    """Queue a manual run, once per ``token``. ``requested_by``: who asked, recorded with
    the run (the Kubernetes user the API server vouched for, or an administrator's
    database login); None when unknown. ``parameters``: values checked by the caller
    (``engine.parameters.check``), recorded with the run."""
    if not token:
        raise ValueError(
            "a run-now request needs a non-empty token (it makes the request idempotent)"
        )
    with conn.transaction():
        params = {
            "definition_id": definition_id,
            "token": token,
            "trigger": trigger,
            "scheduled_for": scheduled_for,
            "requested_by": requested_by,
            "parameters": json.dumps(dict(parameters)) if parameters else None,
        }
        conn.execute(queries.get("lock_request"), params)
        row = conn.execute(queries.get("enqueue_manual"), params).fetchone()
        if row:
            return Enqueued(Run.from_row(row), created=True)
        row = conn.execute(queries.get("run_by_request"), params).fetchone()
        if row is None:
            raise UnknownDefinition(f"no live definition with id {definition_id}")
        return Enqueued(Run.from_row(row), created=False)


@dataclass(frozen=True)
class CancelOutcome:
    cancelled: list[Run]  # were QUEUED: now CANCELLED
    asked_to_stop: list[Run]  # were RUNNING: cancel_requested set


def cancel_run(
    conn: Connection,
    run_id: int,
    *,
    by: str,
    why: str = "cancelled by request",
    now: datetime | None = None,
) -> CancelOutcome:
    """``by``: one of the ``BY_*`` words, optionally followed by a detail in parentheses."""
    return _cancel(conn, run_id=run_id, definition_id=None, by=by, why=why, now=now)


def cancel_definition(
    conn: Connection, definition_id: UUID, *, by: str, why: str, now: datetime | None = None
) -> CancelOutcome:
    """Cancel every queued run of a definition and ask its running ones to stop."""
    return _cancel(conn, run_id=None, definition_id=definition_id, by=by, why=why, now=now)


def _cancel(
    conn: Connection,
    *,
    run_id: int | None,
    definition_id: UUID | None,
    by: str,
    why: str,
    now: datetime | None,
) -> CancelOutcome:
    params = {"run_id": run_id, "definition_id": definition_id, "by": by, "why": why, "now": now}
    with conn.transaction():
        cancelled = conn.execute(queries.get("cancel_queued"), params).fetchall()
        asked = conn.execute(queries.get("request_cancel_running"), params).fetchall()
    return CancelOutcome(
        cancelled=[Run.from_row(row) for row in cancelled],
        asked_to_stop=[Run.from_row(row) for row in asked],
    )


@dataclass(frozen=True)
class Counts:
    running: int
    queued: int


def for_status(conn: Connection, definition_id: UUID) -> tuple[Counts, Run | None]:
    """The running and queued counts and the newest run that has started, any trigger
    (what ``status.lastRun`` shows), read in one snapshot: ACTIVE, QUEUED and LAST STATUS
    of one status never disagree about a run claimed while it was rendered."""
    row = conn.execute(queries.get("runs_for_status"), {"definition_id": definition_id}).fetchone()
    assert row is not None  # an aggregate: always one row
    last = Run.from_row(row) if row["id"] is not None else None
    return Counts(int(row["running"]), int(row["queued"])), last


@dataclass(frozen=True)
class Ending:
    """How (and whether) a run ended, as the Job cleanup needs to know it."""

    status: str
    reason: str | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    checked_at: datetime


def endings(
    conn: Connection, run_ids: list[int], *, now: datetime | None = None
) -> dict[int, Ending]:
    rows = conn.execute(queries.get("run_endings"), {"ids": run_ids, "now": now}).fetchall()
    return {
        row["id"]: Ending(
            row["status"],
            row["reason"],
            row["finished_at"],
            row["cancel_requested_at"],
            row["checked_at"],
        )
        for row in rows
    }
