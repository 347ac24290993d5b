"""Verdicts for silent container runs: ask the API before calling a run dead (I8).

A run whose heartbeats stopped is not necessarily dead. Its pod may have finished — the
heartbeat sidecar ends with it — while the operator could not see the Job: the API server
was down, or the watch missed it. Failing such a run ``HeartbeatLost`` would retry work
that succeeded. So the reaper (``engine.reap``, with the Kubernetes launcher) only marks
a silent run ``outcome_pending_at``, and this module settles it from the Job:

- the Job finished → its outcome, exactly as the Job watch reads it (``COMPLETED``, or the
  real failure reason: ``NonZeroExit``, ``OOMKilled``, ``Evicted``, ...);
- the Job is gone without a verdict → ``FAILED/OutcomeUnknown``: nobody can tell whether
  the work ran to success, so by default it is *not* retried (opt in with ``retryOn``);
  a run whose cancellation was requested ends ``CANCELLED`` instead;
- the Job is still active, and neither the sidecar (``workload_ended_at``) nor the pod
  status says the workload ended → the API confirms the silence: ``FAILED/HeartbeatLost``
  (``Orphaned`` if it never beat), retried by the policy as before;
- the Job is still active but the workload ended → wait: the kubelet or the Job
  controller has not caught up yet;
- the API server cannot be reached → wait, and ask again next round. A verdict is late
  while the API is away, never wrong (fail open).

Every write is fenced on the run's lease (and, for the silence, on the run still pending),
so the Job watch, a resync or another replica racing this one changes nothing twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import lease
from pgsched.k8s import api, outcomes
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = "OutcomeUnknown"


@dataclass
class VerdictResult:
    pending: int = 0
    recorded: dict[int, str] = field(default_factory=dict)  # run id → status/reason
    waiting: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    """``outcome`` to record, ``silent`` (confirmed dead), or neither: wait."""

    outcome: outcomes.Outcome | None = None
    silent: bool = False
    why: str = ""


def decide(row: Obj, job: Obj | None, pods: list[Obj]) -> Verdict:
    """What a pending run's Job (None: gone) and pods say; pure, for tests and logs."""
    if job is None:
        if row["cancel_requested"]:
            return Verdict(
                outcomes.Outcome("CANCELLED", "Cancelled", "its Job was gone after cancellation")
            )
        ended = row["workload_ended_at"]
        seen = f"the workload ended at {ended.isoformat()}" if ended else "nothing said it ended"
        return Verdict(
            outcomes.Outcome(
                "FAILED",
                OUTCOME_UNKNOWN,
                f"the run went silent and its Job {row['k8s_job_name']} is gone without a"
                f" recorded outcome ({seen}); whether it succeeded cannot be known,"
                f" so it is not retried unless retryOn lists {OUTCOME_UNKNOWN}",
            )
        )
    if outcomes.finished(job):
        outcome = outcomes.of_job(
            job, pods, deleted=False, cancel_requested=bool(row["cancel_requested"])
        )
        return Verdict(outcome)
    if row["workload_ended_at"] is not None or any(_pod_ended(pod) for pod in pods):
        return Verdict(why="the workload ended; its Job has not recorded the outcome yet")
    return Verdict(silent=True, why="its Job is still active")


def _pod_ended(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(
        (item.get("state") or {}).get("terminated") for item in containers
    )


def run_once(
    conn: Connection, kube: api.KubeApi, *, limit: int = 100, now: datetime | None = None
) -> VerdictResult:
    """Settle what can be settled among pending runs; an unreachable API raises
    ``api.ApiError`` (the runs stay pending: the caller logs and comes back later)."""
    result = VerdictResult()
    rows = conn.execute(queries.get("runs_awaiting_verdict"), {"limit": limit}).fetchall()
    result.pending = len(rows)
    for row in rows:
        namespace = row["namespace"]
        try:
            job: Obj | None = kube.get(
                api.path_of(
                    group="batch", namespace=namespace, plural="jobs", name=row["k8s_job_name"]
                )
            )
        except api.ApiError as error:
            if not error.not_found:
                raise
            job = None
        pods: list[Obj] = []
        if job is not None:
            pods = api.pods_of_job(kube, namespace, row["k8s_job_name"])
        _apply(conn, row, decide(row, job, pods), result, now=now)
    return result


def _apply(
    conn: Connection, row: Obj, verdict: Verdict, result: VerdictResult, *, now: datetime | None
) -> None:
    log_run = logs.for_labels(
        log, run_id=row["id"], namespace=row["namespace"], name=row["name"], attempt=row["attempt"]
    )
    run_lease = lease.Lease(row["id"], row["lease_token"])
    silent_since = row["heartbeat_at"] or row["started_at"]
    if verdict.outcome is not None:
        outcome = verdict.outcome
        if outcomes.write(conn, run_lease, outcome, logger=log_run):
            result.recorded[row["id"]] = outcome.reason or outcome.status
            log_run.warning(
                "run %s: silent since %s; the API says %s %s",
                row["id"],
                silent_since.isoformat(),
                outcome.status,
                outcome.reason or "",
            )
        return
    if not verdict.silent:
        result.waiting.append(row["id"])
        log_run.info("run %s: verdict pending: %s", row["id"], verdict.why)
        return
    failed = conn.execute(
        queries.get("fail_silent_run"),
        {
            "run_id": row["id"],
            "lease_token": row["lease_token"],
            "now": now,
            "error": f"no heartbeat since {silent_since.isoformat()} and {verdict.why}"
            " (the API confirmed the worker is gone silent)",
        },
    ).fetchone()
    if failed is not None:
        result.recorded[row["id"]] = failed["reason"]
        log_run.warning(
            "run %s: silent since %s and %s: %s",
            row["id"],
            silent_since.isoformat(),
            verdict.why,
            failed["reason"],
        )
