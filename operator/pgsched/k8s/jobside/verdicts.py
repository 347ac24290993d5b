"""Verdicts for silent container runs: ask the API before calling a run dead (I8).

A run whose heartbeats stopped is not necessarily dead: its pod may have finished while the
operator could not see the Job, and failing it ``HeartbeatLost`` would retry work that
succeeded. So the reaper only marks a silent run ``outcome_pending_at`` and this module
settles it from its Job: the Job's outcome if it finished, ``OutcomeUnknown`` if it is
gone, ``HeartbeatLost`` if the API confirms the silence, ``Evicted`` if an admission queue
took it back; and waits while the API server is away or its view may still be stale.
Every write is fenced on the run's lease. A round reads each namespace's Jobs and pods
with one list each, selected by run id.

Each case and its reason: docs/architecture.md, "Verdicts for silent runs".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import lease
from pgsched.k8s import names
from pgsched.k8s.client import api, reads
from pgsched.k8s.jobside import outcomes
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = "OutcomeUnknown"
EVICTED = "Evicted"  # as a pod's eviction (k8s.jobside.outcomes): on the default retry list
# How long after the API server was last unreachable its pod statuses may still predate
# the outage (the kubelet posts them every 10 s at most, and at once on a change).
STALE_VIEW_SECONDS = 30.0


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
        job_name = row["k8s_job_name"] or names.job_name(row["name"], row["id"])
        ended = row["workload_ended_at"]
        seen = f"the workload ended at {ended.isoformat()}" if ended else "nothing said it ended"
        return Verdict(
            outcomes.Outcome(
                "FAILED",
                OUTCOME_UNKNOWN,
                f"the run went silent and its Job {job_name} is gone without a"
                f" recorded outcome ({seen}); whether it succeeded cannot be known,"
                f" so it is not retried unless retryOn lists {OUTCOME_UNKNOWN}",
            )
        )
    if outcomes.finished(job):
        cancelled = outcomes.cancel_stopped(
            row["cancel_requested"], row["cancel_requested_at"], row["workload_ended_at"], pods
        )
        outcome = outcomes.of_job(job, pods, deleted=False, cancel_requested=cancelled)
        return Verdict(outcome)
    if (job.get("spec") or {}).get("suspend"):
        if row["heartbeat_at"] is None and row["workload_ended_at"] is None:
            # No pod yet, so no heartbeat: an admission queue holds the Job (k8s.jobside.starts).
            return Verdict(why="its Job is suspended, waiting for admission")
        return Verdict(outcomes.Outcome("FAILED", EVICTED, _evicted(job)))
    if row["workload_ended_at"] is not None or any(_pod_ended(pod) for pod in pods):
        return Verdict(why="the workload ended; its Job has not recorded the outcome yet")
    if row["heartbeat_at"] is None and all(_launching(pod) for pod in pods):
        # Never beat, and no pod of it has got as far as running (none yet, or Pending: not
        # scheduled, pulling, initializing): it is launching, not silent, however long
        # the API server kept the Job controller and the kubelet from it. Its start bound
        # (k8s.jobside.starts) ends it if it never starts.
        return Verdict(why="its pod has not started yet (launching, within its start bound)")
    return Verdict(silent=True, why="its Job is still active")


def _evicted(job: Obj) -> str:
    name = job["metadata"]["name"]
    queue = (job["metadata"].get("labels") or {}).get(names.KUEUE_QUEUE_LABEL)
    by = f"admission queue {queue}" if queue else "whatever suspends it"
    return (
        f"its Job {name} was suspended again after its workload started: {by} evicted it"
        " (preemption, or its Workload deactivated) and would start the workload over"
        " under this run; the run ends here and its retry policy decides"
    )


def _launching(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in (None, "Pending")


def _pod_ended(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(
        (item.get("state") or {}).get("terminated") for item in containers
    )


class Verdicts:
    """One replica's verdict service: ``run_once`` that remembers when the API server was
    last unreachable (initially: when the replica started, which may be mid-outage).

    Its own requests are not the only witness: a replica that was not the one judging
    during an outage never failed a verdict request, yet its watches and writers did
    (``api.Reachability``, shared by the whole client). Both are asked: a view is fresh
    only STALE_VIEW_SECONDS after the later of the two."""

    def __init__(self, kube: api.KubeApi, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._clock = clock
        self._unreachable_at = clock()

    def run_once(self, conn: Connection, *, now: datetime | None = None) -> VerdictResult:
        returned = self._kube.reachability.seconds_since_return()
        fresh = self._clock() - self._unreachable_at >= STALE_VIEW_SECONDS and (
            returned is None or returned >= STALE_VIEW_SECONDS
        )
        try:
            return run_once(conn, self._kube, now=now, confirm_silence=fresh)
        except api.ApiError:
            self._unreachable_at = self._clock()
            raise


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    *,
    limit: int = 100,
    now: datetime | None = None,
    confirm_silence: bool = True,
) -> VerdictResult:
    """Settle what can be settled among pending runs; an unreachable API raises
    ``api.ApiError`` (the runs stay pending: the caller logs and comes back later).
    Without ``confirm_silence`` (the API's view may be stale) silent runs wait."""
    result = VerdictResult()
    rows = conn.execute(queries.get("runs_awaiting_verdict"), {"limit": limit}).fetchall()
    result.pending = len(rows)
    for row, job, pods in with_jobs(kube, rows):
        verdict = decide(row, job, pods)
        if verdict.silent and not confirm_silence:
            verdict = Verdict(
                why="the API server was unreachable moments ago: its view of the pod may"
                " predate the outage"
            )
        _apply(conn, row, verdict, result, now=now)
    return result


def with_jobs(kube: api.KubeApi, rows: list[Obj]) -> Iterator[tuple[Obj, Obj | None, list[Obj]]]:
    """Each run row with its Job (None: gone) and that Job's pods (``reads.jobs_of_rows``)."""
    for row, jobs, pods in reads.jobs_of_rows(kube, rows):
        job = _job_of(row, jobs)
        yield row, job, pods.get(job["metadata"]["name"], []) if job else []


def _job_of(row: Obj, jobs: dict[str, Obj]) -> Obj | None:
    """The run's Job: by its recorded name, or (launch record lost) by the deterministic
    name if it carries this run's lease."""
    if row["k8s_job_name"]:
        return jobs.get(row["k8s_job_name"])
    job = jobs.get(names.job_name(row["name"], row["id"]))
    if job is None:
        return None
    carried = names.job_lease_fingerprint(job["metadata"].get("annotations"))
    return job if carried == names.lease_fingerprint(str(row["lease_token"])) else None


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
