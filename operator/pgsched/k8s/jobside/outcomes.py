"""What a finished Job says about its run, and recording it (fenced).

Reading order, most specific first: a cancelled run ends ``CANCELLED`` however its pod
exited — if the cancellation came while its workload ran (``cancel_stopped``: one requested
after the heartbeat sidecar reported the workload's end, or after the end its pod reports,
found nothing to stop, and the Job's own outcome stands); a Job failed by its ``activeDeadlineSeconds`` is ``DeadlineExceeded``; an evicted
pod is ``Evicted``; a main container killed for memory is ``OOMKilled``; any other non-zero
exit is ``NonZeroExit`` with the exit code; a Job deleted while its run was still running
is ``JobDeleted``. These are the reasons ``retryOn``/``neverRetryOn`` match.

The record is a fenced finish, and only for the claim the Job was launched for (the lease
fingerprint it carries must be the run's current one), so a Job of an attempt that was
already reaped, or finished by the SDK runner itself, or left from a lost claim, changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pgsched.db.connection import Connection
from pgsched.engine import lease, runs
from pgsched.engine.lease import FinalStatus
from pgsched.k8s import names
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    status: FinalStatus
    reason: str | None = None
    error: str | None = None
    exit_code: int | None = None


_SUCCEEDED = frozenset({"Complete", "SuccessCriteriaMet"})


def finished(job: Obj) -> bool:
    return bool(
        _true_conditions(job) & {"Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"}
    )


def succeeded(job: Obj) -> bool:
    return bool(_true_conditions(job) & _SUCCEEDED)


# kubelet reports a container's end to the second (truncated), on the node's clock: a
# cancellation counts as later than such an end only from this long after the reported
# second (the second itself, and a second of clock difference between node and database).
POD_END_MARGIN = timedelta(seconds=2)


def cancel_stopped(
    cancel_requested: bool,
    cancel_requested_at: datetime | None,
    workload_ended_at: datetime | None,
    pods: list[Obj],
) -> bool:
    """Whether a run's cancellation decides its outcome: it was requested before the
    workload ended. A request that came later — ``concurrencyPolicy: Replace``'s next
    occurrence, or ``pgsched cancel``, while an API outage kept the finished Job from being
    read — found the work done; calling that run CANCELLED would report work that ran to
    its end as stopped.

    The end is the heartbeat sidecar's note (``workload_ended_at``, the database's clock,
    like the request). Without one — the sidecar could not reach the database as the pod
    stopped — the end its ``pods`` report stands in (:data:`POD_END_MARGIN`). With neither,
    the cancellation decides: a cooperative workload exits 0 when told to stop, and
    reporting COMPLETED for work that was stopped would trigger what follows it."""
    if not cancel_requested:
        return False
    if cancel_requested_at is None:
        return True
    if workload_ended_at is not None:
        return cancel_requested_at < workload_ended_at
    reported = _reported_end(pods)
    if reported is None:
        return True
    return cancel_requested_at < reported + POD_END_MARGIN


def _reported_end(pods: list[Obj]) -> datetime | None:
    """When the newest pod's containers had all ended (the latest ``finishedAt``), or None
    while one has not ended or reports no time."""
    newest = max(pods, key=_created, default=None)
    statuses = ((newest or {}).get("status") or {}).get("containerStatuses") or []
    ends = [
        ((item.get("state") or {}).get("terminated") or {}).get("finishedAt") for item in statuses
    ]
    if not ends or not all(ends):
        return None
    return max(names.timestamp(end) for end in ends)


def of_job(job: Obj, pods: list[Obj], *, deleted: bool, cancel_requested: bool) -> Outcome | None:
    """The run's outcome, or None while the Job is still running."""
    conditions = _true_conditions(job)
    succeeded = bool(conditions & _SUCCEEDED)
    failed = bool(conditions & {"Failed", "FailureTarget"})
    if not (succeeded or failed or deleted):
        return None
    main = _main_termination(pods)
    exit_code = main.get("exitCode") if main else None
    if cancel_requested:
        how = f"exit code {exit_code}" if exit_code is not None else "its Job was deleted"
        return Outcome(
            "CANCELLED", "Cancelled", f"stopped after cancellation was requested ({how})", exit_code
        )
    if succeeded:
        return Outcome("COMPLETED", exit_code=exit_code)
    if failed:
        return _failure(job, pods, main)
    return Outcome("FAILED", "JobDeleted", "the Job was deleted while the run was running")


def _failure(job: Obj, pods: list[Obj], main: Obj | None) -> Outcome:
    job_reason = _condition_reason(job, {"Failed", "FailureTarget"})
    if job_reason == "DeadlineExceeded":
        return Outcome("FAILED", "DeadlineExceeded", "the Job exceeded its activeDeadlineSeconds")
    for pod in pods:
        status = pod.get("status") or {}
        disrupted = any(
            item.get("type") == "DisruptionTarget" and item.get("status") == "True"
            for item in status.get("conditions") or []
        )
        if status.get("reason") == "Evicted" or disrupted:
            return Outcome("FAILED", "Evicted", status.get("message") or "the pod was evicted")
    if main:
        code = main.get("exitCode")
        container = main.get("container", "?")
        if main.get("reason") == "OOMKilled":
            return Outcome(
                "FAILED",
                "OOMKilled",
                f"container {container} was killed for exceeding its memory limit",
                code,
            )
        detail = f": {main['message']}" if main.get("message") else ""
        return Outcome(
            "FAILED", "NonZeroExit", f"container {container} exited with code {code}{detail}", code
        )
    return Outcome("FAILED", "NonZeroExit", f"the Job failed ({job_reason or 'no reason given'})")


def _true_conditions(job: Obj) -> set[str]:
    return {
        item["type"]
        for item in (job.get("status") or {}).get("conditions") or []
        if item.get("status") == "True"
    }


def _condition_reason(job: Obj, types: set[str]) -> str | None:
    for item in (job.get("status") or {}).get("conditions") or []:
        if item.get("type") in types and item.get("status") == "True":
            return str(item.get("reason") or "") or None
    return None


def _created(pod: Obj) -> str:
    """The pod's creationTimestamp (RFC 3339 in UTC: its order is the time order)."""
    return str(pod.get("metadata", {}).get("creationTimestamp", ""))


def _main_termination(pods: list[Obj]) -> Obj | None:
    """The first non-zero (else any) termination of a main container, newest pod first."""
    found: list[Obj] = []
    for pod in sorted(pods, key=_created, reverse=True):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated:
                found.append({**terminated, "container": status.get("name")})
        if found:
            break
    failing = [item for item in found if item.get("exitCode")]
    candidates = failing or found
    return candidates[0] if candidates else None


def record(
    conn: Connection,
    run_id: int,
    lease_fingerprint: str,
    *,
    job: Obj,
    pods: Callable[[], list[Obj]],
    deleted: bool,
    namespace_ending: Callable[[], bool],
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log,
) -> Outcome | None:
    """Record a finished (or deleted) Job's outcome for its run; None if nothing changed.

    ``pods`` reads the Job's pods, only when the run is still this Job's to end (a restart
    finds many finished Jobs of ended runs: no request for theirs). ``namespace_ending``
    says whether the Job's namespace is being deleted, asked only of a run that failed:
    ``kubectl delete namespace`` deletes the pods and Jobs itself, racing pgsched's
    finalizer, and a run it stopped is cancelled by the namespace's deletion, not failed.
    ``logger`` is the caller's run logger, passed on to the fenced finish."""
    run = runs.get(conn, run_id)
    if (
        run is None
        or run.status != "RUNNING"
        or names.lease_fingerprint(str(run.lease_token)) != lease_fingerprint
    ):
        return None
    if not (deleted or finished(job)):
        return None
    read = pods()
    cancelled = cancel_stopped(
        run.cancel_requested, run.cancel_requested_at, run.workload_ended_at, read
    )
    outcome = of_job(job, read, deleted=deleted, cancel_requested=cancelled)
    if outcome is None:
        return None
    if outcome.status == "FAILED" and namespace_ending():
        namespace = str((job.get("metadata") or {}).get("namespace") or "?")
        runs.cancel_run(
            conn, run.id, by=runs.BY_NAMESPACE_DELETION, why=f"namespace {namespace} deleted"
        )
        outcome = Outcome(
            "CANCELLED",
            "Cancelled",
            f"stopped by the deletion of namespace {namespace} ({outcome.error})",
            outcome.exit_code,
        )
    assert run.lease_token is not None
    recorded = write(conn, lease.Lease(run.id, run.lease_token), outcome, logger=logger)
    return outcome if recorded else None


def write(
    conn: Connection,
    run_lease: lease.Lease,
    outcome: Outcome,
    *,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log,
) -> bool:
    """The fenced finish of ``outcome``; False if the run was no longer ours to end (every
    replica reads the same Job, and all but one lose that race: logged at DEBUG)."""
    return lease.finish(
        conn,
        run_lease,
        outcome.status,
        reason=outcome.reason,
        error=outcome.error,
        exit_code=outcome.exit_code,
        logger=logger,
        lost_level=logging.DEBUG,
    )
