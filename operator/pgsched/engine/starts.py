"""Starts: a run is running, as users see it, only once its workload started (I13).

A claimed run is ``RUNNING`` from its claim (it holds its slot from then on), but its
workload may never start: an image that cannot be pulled, a missing Secret, a pod no node
can take, a Job an admission queue keeps suspended; and a heartbeat says only that the pod
lives. Until the workload's start is recorded here (``pgsched.run_starts``) the run is
*launching*, with the pod's own reason for waiting. The launching state is bounded
(``startTimeoutSeconds``, ``admissionTimeoutSeconds``); a run still launching at its bound
ends ``FAILED`` with the reason its pod gave, which the default retry list does not name.

This module is the database side; the Kubernetes side reads the pods
(``pgsched.k8s.jobside.starts``). Every write is fenced on the run's lease.

The states and bounds: docs/architecture.md, "Workload starts and their bounds".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched.db import queries
from pgsched.engine.launcher import LAUNCH_FAILED
from pgsched.engine.models import Definition, Run, Start

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

# The spec's defaults (crds/: the same numbers, checked by tests/unit/test_spec_defaults.py).
START_TIMEOUT_SECONDS = 300
ADMISSION_TIMEOUT_SECONDS = 3600

IMAGE_PULL_FAILED = "ImagePullFailed"
CONTAINER_CONFIG_ERROR = "ContainerConfigError"
POD_SECURITY_REJECTED = "PodSecurityRejected"
UNSCHEDULABLE = "Unschedulable"
ADMISSION_TIMEOUT = "AdmissionTimeout"
START_TIMEOUT = "StartTimeout"
# Why a run that never started ended: part of the failure-reason vocabulary (engine.retry).
REASONS = frozenset(
    {
        IMAGE_PULL_FAILED,
        CONTAINER_CONFIG_ERROR,
        POD_SECURITY_REJECTED,
        UNSCHEDULABLE,
        ADMISSION_TIMEOUT,
        START_TIMEOUT,
    }
)
# The reasons that say the job as specified cannot start where it is (the same spec in the
# same namespace fails the same way): not Unschedulable or the timeouts, which depend on
# what else runs. A run that ended with one makes the job not Ready (``refusal``).
CANNOT_START = frozenset(
    {IMAGE_PULL_FAILED, CONTAINER_CONFIG_ERROR, POD_SECURITY_REJECTED, LAUNCH_FAILED}
)
REASONS_CANNOT_START = sorted(CANNOT_START)  # as the query's text[]
# What a launching run waits for while its Job is suspended by an admission queue.
AWAITING_ADMISSION = "AwaitingAdmission"
# Run-event statuses (the outbox, not job_runs): the workload started; it cannot start yet.
STARTED = "STARTED"
LAUNCHING = "LAUNCHING"


@dataclass(frozen=True)
class Refusal:
    """The run whose end says the job cannot start: its id, reason and error."""

    run_id: int
    reason: str
    error: str


def refusal(conn: Connection, definition: Definition) -> Refusal | None:
    """Why the job cannot start, if it cannot: the newest of its recent runs with a verdict
    on its launch ended with a ``CANNOT_START`` reason, since the definition last changed
    (``sql/functions/cannot_start.sql``). A later run whose workload starts, or a change of
    the spec, ends it."""
    row = conn.execute(
        queries.get("cannot_start"),
        {
            "definition_id": definition.id,
            "since": definition.updated_at,
            "reasons": REASONS_CANNOT_START,
        },
    ).fetchone()
    return refusal_in(row) if row is not None else None


def refusal_in(row: Mapping[str, Any]) -> Refusal | None:
    """The refusal in a row with ``pgsched.cannot_start``'s columns (None: it has none)."""
    if row["refused_run"] is None:
        return None
    return Refusal(
        int(row["refused_run"]), str(row["refused_reason"]), str(row["refused_error"] or "")
    )


def refused_message(refusal: Refusal, generation: int) -> str:
    """The words every screen uses for a job that cannot start: its Ready condition (and
    so ``kubectl get sj``, describe and doctor) and the UI's health."""
    return (
        f"run {refusal.run_id} could not start: {refusal.error or refusal.reason}; runs of"
        f" generation {generation} are expected to fail the same way until the spec or its"
        " namespace changes (the next run whose workload starts makes the job Ready again)"
    )


def shown_status(run: Run, start: Start | None) -> str:
    """The status users see: ``LAUNCHING`` for a running run whose workload is known not
    to have started yet, else the run's own."""
    if run.status == "RUNNING" and start is not None and start.launching:
        return LAUNCHING
    return run.status


def described(run: Run, start: Start | None) -> list[tuple[str, str | datetime | None]]:
    """The lines ``pgsched describe`` and the UI's run page show about the workload's
    start (one list for both, so they say the same): its start, or why not yet."""
    if start is None:
        return []
    if start.workload_started_at is not None:
        return [("Workload started", start.workload_started_at)]
    if run.status != "RUNNING":
        return [("Workload started", f"never (last seen: {start.waiting_reason})")]
    return [
        ("Launching", f"{start.waiting_reason}: {start.waiting_message}"),
        ("Start bound", start.bound_at),
    ]


def start_timeout(spec: Mapping[str, Any]) -> int:
    """A stored (validated) spec's ``startTimeoutSeconds``."""
    return int(spec.get("startTimeoutSeconds") or START_TIMEOUT_SECONDS)


def admission_timeout(spec: Mapping[str, Any]) -> int:
    """A stored (validated) spec's ``admissionTimeoutSeconds``."""
    return int(spec.get("admissionTimeoutSeconds") or ADMISSION_TIMEOUT_SECONDS)


def launching(conn: Connection, *, limit: int = 100) -> list[dict[str, Any]]:
    """Running runs whose workload has no recorded start, the least recently observed
    first: with their definition's namespace, name and spec, and what was last seen."""
    return conn.execute(queries.get("launching_runs"), {"limit": limit}).fetchall()


def defer_bounds(conn: Connection, run_ids: list[int], *, until: datetime) -> None:
    """Move the bounds of these launching runs to no earlier than ``until`` (the API server
    could not be reached: ``pgsched.k8s.jobside.starts``), runs never observed yet included."""
    conn.execute(queries.get("defer_start_bounds"), {"ids": run_ids, "until": until})


def observe(
    conn: Connection,
    run_id: int,
    lease_token: UUID,
    *,
    workload_started_at: datetime | None = None,
    waiting_reason: str | None = None,
    waiting_message: str | None = None,
    awaiting_admission: bool = False,
    admitted_at: datetime | None = None,
    bound_at: datetime | None = None,
    announce: bool = False,
    now: datetime,
) -> Start | None:
    """Record what the run's pod shows (fenced on the run still RUNNING with this lease);
    the stored row, or None if the run is no longer this lease's. The start, or a change
    of what the run waits for if ``announce``, goes to the run-events outbox: the status
    is rendered again and an Event says it."""
    row = conn.execute(
        queries.get("record_start_observation"),
        {
            "run_id": run_id,
            "lease_token": lease_token,
            "workload_started_at": workload_started_at,
            "waiting_reason": waiting_reason,
            "waiting_message": waiting_message,
            "awaiting_admission": awaiting_admission,
            "admitted_at": admitted_at,
            "bound_at": bound_at,
            "announce": announce,
            "now": now,
        },
    ).fetchone()
    return Start.from_row(row) if row else None


def of_run(conn: Connection, run_id: int) -> Start | None:
    row = conn.execute(queries.get("run_start"), {"run_id": run_id}).fetchone()
    return Start.from_row(row) if row else None
