"""Starts of runs' workloads, read from their pods (the database side: ``engine.starts``).

Each round reads the Jobs and pods of running runs without a recorded workload start (one
list of each per namespace, selected by run id) and records, fenced on the run's lease,
what they show: the workload started, the Job awaits admission, or the pod's own reason for
waiting. A run still launching at its bound (``startTimeoutSeconds``,
``admissionTimeoutSeconds``) ends ``FAILED`` with the reason its pod gave.

The bound does not run while the run's pod cannot be observed (the API server away, or
answering slowly): that time is not the run's, so the bound is moved by it, stored, and
given a catch-up for the kubelet and the Job controller.

The cases and the moved bound: docs/architecture.md, "Workload starts and their bounds".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pgsched import logs
from pgsched.db import clock
from pgsched.db.connection import Connection
from pgsched.engine import lease, starts
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import outcomes, verdicts
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

# Container waiting reasons that say the workload cannot start as it is, and the reason a
# run still showing one at its bound ends with.
_BLOCKED = {
    "ErrImagePull": starts.IMAGE_PULL_FAILED,
    "ImagePullBackOff": starts.IMAGE_PULL_FAILED,
    "InvalidImageName": starts.IMAGE_PULL_FAILED,
    "ErrImageNeverPull": starts.IMAGE_PULL_FAILED,
    "RegistryUnavailable": starts.IMAGE_PULL_FAILED,
    "CreateContainerConfigError": starts.CONTAINER_CONFIG_ERROR,
    "CreateContainerError": starts.CONTAINER_CONFIG_ERROR,
}
# ... of which these can never change by waiting.
_HOPELESS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
_ENDS_AS = {
    **_BLOCKED,
    starts.UNSCHEDULABLE: starts.UNSCHEDULABLE,
    starts.AWAITING_ADMISSION: starts.ADMISSION_TIMEOUT,
}


@dataclass(frozen=True)
class Seen:
    """What a launching run's Job and pods show: its workload's start, or why not yet."""

    started_at: datetime | None = None
    reason: str | None = None
    message: str = ""
    awaiting_admission: bool = False

    @property
    def hopeless(self) -> bool:
        return self.reason in _HOPELESS


@dataclass
class StartsResult:
    launching: int = 0
    started: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # run id → the pod's reason
    ended: dict[int, str] = field(default_factory=dict)  # run id → the run's reason


def seen(job: Obj, pods: list[Obj]) -> Seen | None:
    """What the Job and its pods say about the workload's start; None when the Job
    finished (its outcome is the Job watch's to record). Pure."""
    if outcomes.finished(job):
        return None
    name = job["metadata"]["name"]
    if (job.get("spec") or {}).get("suspend"):
        queue = (job["metadata"].get("labels") or {}).get(names.KUEUE_QUEUE_LABEL)
        by = f"admission queue {queue}" if queue else "whatever suspended it"
        return Seen(
            reason=starts.AWAITING_ADMISSION,
            message=f"Job {name} is suspended, waiting for admission by {by}",
            awaiting_admission=True,
        )
    if not pods:
        return Seen(reason="PodNotCreated", message=f"Job {name} has no pod yet")
    pod = max(pods, key=lambda item: item["metadata"].get("creationTimestamp") or "")
    where = f"pod {pod['metadata']['name']}"
    status = pod.get("status") or {}
    mains = status.get("containerStatuses") or []
    for container in mains:
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            began = (state.get("running") or state.get("terminated") or {}).get("startedAt")
            if began:
                return Seen(started_at=datetime.fromisoformat(began))
    waiting = [
        (container.get("name"), (container.get("state") or {}).get("waiting") or {})
        for container in [*(status.get("initContainerStatuses") or []), *mains]
    ]
    for container, state in waiting:
        if state.get("reason") in _BLOCKED:
            return Seen(
                reason=state["reason"],
                message=f"{where}, container {container}: {state.get('message') or ''}".strip(),
            )
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return Seen(
                reason=starts.UNSCHEDULABLE,
                message=f"{where}: {condition.get('message') or condition.get('reason')}",
            )
    for container, state in reversed(waiting):
        if state.get("reason"):
            return Seen(reason=state["reason"], message=f"{where}, container {container}")
    return Seen(reason=status.get("phase") or "Pending", message=where)


# A run not observed for longer than this was out of sight (rounds come every few
# seconds): the time does not count towards its bound.
UNOBSERVED = timedelta(seconds=30)
# After a time out of sight a bound does not expire before this: kubelet and the Job
# controller report what happened meanwhile only once they reach the API server again.
# The Job controller created pods 38 s (chaos seed 2124390831) and 60 s (seed 1731164321)
# after the API server's return on the local node; 60 s was this bound's first value, and
# the second seed's runs ended StartTimeout 2 s past it, their pods just created.
CATCH_UP = timedelta(seconds=120)
# A round whose reads took longer than this waited for an API server that was away (a
# healthy list answers in milliseconds): it judges no bound, and gives its runs CATCH_UP.
# Seen in a chaos run (seed 959735939): a round blocked through a 25 s outage, then read
# pods as they were before it, and ended runs whose pods had started meanwhile.
SLOW_READ = timedelta(seconds=10)


@dataclass
class Recovery:
    """When the API server came back after this replica's rounds last found it away.

    The Job controller and kubelet list everything again after an absence before they
    create pods or report starts (up to a minute on the local node), also for Jobs
    created just after the return, which no deferral of a failed round reached (cluster
    chaos seed 2124390831: runs launched 0.3 s after a 33 s outage, their pods created 38 s
    later, ended at their 45 s bound; seed 1731164321: 60 s later). So no bound ends before
    :data:`CATCH_UP` after the
    return. Kept by the operator across rounds, and told of returns the client's other
    requests saw (``api.Reachability``: chaos seed 1731164321, replayed, found no launching
    run during a 28 s outage, so no round failed, and runs launched 15 s after the return
    ended at their 45 s bound, their pods created 40 s after the launch). A replica
    started after the absence has not seen it, and bounds runs as usual."""

    away: bool = False
    back_at: datetime | None = None

    def floor(self) -> datetime | None:
        return None if self.back_at is None else self.back_at + CATCH_UP

    def answered(self, at: datetime) -> None:
        if self.away:
            self.away, self.back_at = False, at

    def returned(self, at: datetime) -> None:
        """The API server came back at ``at``, as another request of the client saw it."""
        if self.back_at is None or at > self.back_at:
            self.back_at = at


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    *,
    limit: int = 100,
    now: datetime | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    recovery: Recovery | None = None,
) -> StartsResult:
    """Observe up to ``limit`` launching runs; an unreachable API raises ``api.ApiError``.
    ``monotonic`` times the round's reads (the database clock says when, not how long);
    ``recovery`` is the operator's memory of the API server's last return."""
    result = StartsResult()
    recovery = recovery or Recovery()
    rows = starts.launching(conn, limit=limit)
    result.launching = len(rows)
    if not rows:
        return result
    at = clock.now(conn, now)
    began = monotonic()
    try:
        observed = list(verdicts.with_jobs(kube, rows))
    except api.ApiError as error:
        if error.unavailable:
            # Even a short absence makes the Job controller and kubelet list everything
            # again before they create pods or report starts: give these runs the catch-up.
            starts.defer_bounds(conn, [row["id"] for row in rows], until=at + CATCH_UP)
            recovery.away = True
        raise
    waited = timedelta(seconds=monotonic() - began)
    recovery.answered(at)
    # The client's other requests (its watches reconnect all the time) saw absences that
    # no round of this loop did: rounds with no launching run read nothing.
    since = kube.reachability.seconds_since_return()
    if since is not None:
        recovery.returned(at - timedelta(seconds=since))
    floor = recovery.floor()
    for row, job, pods in observed:
        found = seen(job, pods) if job else None
        if found is not None:
            _apply(conn, row, found, at, result, waited=waited, floor=floor)
    return result


@dataclass(frozen=True)
class Bound:
    """When a launching run ends, by which setting, as of one observation."""

    setting: str
    seconds: int
    at: datetime
    moved: timedelta  # later than the setting alone says: time its pod was out of sight
    judged: bool  # False in the round that finds the run back after a time out of sight


def bound_of(
    row: Obj,
    found: Seen,
    admitted_at: datetime | None,
    at: datetime,
    *,
    waited: timedelta,
    floor: datetime | None = None,
) -> Bound:
    """The bound as of a round at ``at`` whose reads took ``waited``, and no earlier than
    ``floor`` (``Recovery``)."""
    if found.awaiting_admission:
        setting, seconds = "admissionTimeoutSeconds", starts.admission_timeout(row["spec"])
        counted_from = row["started_at"]
    else:
        setting, seconds = "startTimeoutSeconds", starts.start_timeout(row["spec"])
        counted_from = admitted_at or row["started_at"]
    plain = counted_from + timedelta(seconds=seconds)
    bound = plain
    # A bound moved before, in the same phase (admission's and the start's are apart).
    if row["bound_at"] is not None and bool(row["awaiting_admission"]) == found.awaiting_admission:
        bound = max(bound, row["bound_at"])
    # A slow round read the pod as of when its reads were answered; a fast one's are instant.
    slow = waited > SLOW_READ
    read_at = at + waited if slow else at
    unobserved = read_at - (row["observed_at"] or row["started_at"])
    judged = unobserved <= UNOBSERVED and not slow
    if not judged:
        bound = max(bound + unobserved, read_at + CATCH_UP)
    if floor is not None:
        bound = max(bound, floor)
    return Bound(setting, seconds, bound, bound - plain, judged)


def _apply(
    conn: Connection,
    row: Obj,
    found: Seen,
    at: datetime,
    result: StartsResult,
    *,
    waited: timedelta,
    floor: datetime | None,
) -> None:
    log_run = logs.for_labels(
        log, run_id=row["id"], namespace=row["namespace"], name=row["name"], attempt=row["attempt"]
    )
    admitted_at = row["admitted_at"]
    if row["awaiting_admission"] and not found.awaiting_admission and admitted_at is None:
        admitted_at = at
    if found.started_at is not None:
        started = starts.observe(
            conn,
            row["id"],
            row["lease_token"],
            workload_started_at=found.started_at,
            admitted_at=admitted_at,
            now=at,
        )
        if started:
            result.started.append(row["id"])
        return
    if row["workload_ended_at"] is not None:
        return  # it ran: the Job watch and the verdicts record how it ended
    bound = bound_of(row, found, admitted_at, at, waited=waited, floor=floor)
    if found.hopeless or (bound.judged and at >= bound.at):
        reason = _ENDS_AS.get(str(found.reason), starts.START_TIMEOUT)
        why = (
            "can never start"
            if found.hopeless
            else f"did not start within {bound.setting} ({bound.seconds})"
        )
        if bound.moved and not found.hopeless:
            why += (
                f", its bound moved {bound.moved.total_seconds():.0f} s later for time its pod"
                " could not be observed (the API server unreachable, or no operator running)"
            )
        error = f"the workload {why}: {found.reason}: {found.message}"
        outcome = outcomes.Outcome("FAILED", reason, error)
        if outcomes.write(
            conn, lease.Lease(row["id"], row["lease_token"]), outcome, logger=log_run
        ):
            result.ended[row["id"]] = reason
            log_run.warning("run %s: %s", row["id"], error)
        return
    stored = starts.observe(
        conn,
        row["id"],
        row["lease_token"],
        waiting_reason=found.reason,
        waiting_message=found.message,
        awaiting_admission=found.awaiting_admission,
        admitted_at=admitted_at,
        bound_at=bound.at,
        announce=found.reason in _ENDS_AS,
        now=at,
    )
    if stored is not None:
        result.waiting[row["id"]] = str(found.reason)
        if found.reason != row["waiting_reason"]:
            log_run.info("run %s: launching: %s (%s)", row["id"], found.reason, found.message)
