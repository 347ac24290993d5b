"""Starts of runs' workloads, read from their pods (the database side: ``engine.starts``).

Each round reads the Jobs and pods of running runs without a recorded workload start (one
list of each per namespace, selected by run id, as the verdicts do) and records, fenced on
the run's lease, what they show:

- a main container running or terminated → the workload started (its ``startedAt``): the
  run is running as users see it, and ``RunStarted`` is announced;
- the Job suspended (an admission queue such as Kueue holds it; label
  ``kueue.x-k8s.io/queue-name`` names the queue) → *awaiting admission*, bounded by
  ``admissionTimeoutSeconds`` from the claim; once un-suspended, ``startTimeoutSeconds``
  counts from then;
- otherwise the pod's own reason for waiting, most telling first: a container (the
  heartbeat sidecar included) that cannot pull its image or lacks its Secret or ConfigMap,
  the pod unschedulable, then the ordinary ones (``ContainerCreating``,
  ``PodInitializing``, no pod yet).

A run still launching at its bound ends ``FAILED`` with the reason its pod gave
(``engine.starts`` lists them); an image name the kubelet cannot even parse, or a pull
policy ``Never`` for an image the node lacks, ends it at once. A Job that finished or is
gone is left to the Job watch and the verdicts. The API server unreachable → the round
raises ``api.ApiError`` and nothing is decided (the reaper then judges the runs as before,
once they have not been observed for their heartbeat timeout).

**The bound does not run while the API server is away** (``Starts``): meanwhile no pod can
be created and no kubelet can report a start, so that time is not the run's. Each operator
process remembers when its rounds could not reach the API server (from the first failed
round to the next good one) and moves every bound by the blind time that falls after the
run's claim; the message of a run that ends says how much was not counted. A process that
restarts forgets what it saw; a bound then counts as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pgsched import logs
from pgsched.db import clock
from pgsched.db.connection import Connection
from pgsched.engine import lease, starts
from pgsched.k8s import api, names, outcomes, verdicts
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


# Blind windows older than this can no longer move a bound (admissionTimeoutSeconds' maximum
# is far below it): forgotten, so a long-lived process keeps a bounded list.
_REMEMBER_BLIND = timedelta(days=2)


class Starts:
    """The starts service of one operator process: ``run_once`` rounds that remember when
    the API server could not be reached, so bounds do not run meanwhile."""

    def __init__(self, kube: api.KubeApi) -> None:
        self.kube = kube
        self._blind: list[tuple[datetime, datetime]] = []
        self._blind_since: datetime | None = None

    def run_once(self, conn: Connection, *, now: datetime | None = None) -> StartsResult:
        at = clock.now(conn, now)
        # Until this round reaches the API server, the time since the first failed round
        # counts as blind (so a round that succeeds counts it too).
        ongoing = [(self._blind_since, at)] if self._blind_since is not None else []
        try:
            result = run_once(conn, self.kube, now=at, blind=[*self._blind, *ongoing])
        except api.ApiError:
            if self._blind_since is None:
                self._blind_since = at
            raise
        if ongoing:
            self._blind = [w for w in self._blind if w[1] > at - _REMEMBER_BLIND] + ongoing
            self._blind_since = None
        return result


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    *,
    limit: int = 100,
    now: datetime | None = None,
    blind: Sequence[tuple[datetime, datetime]] = (),
) -> StartsResult:
    """Observe up to ``limit`` launching runs; an unreachable API raises ``api.ApiError``.
    ``blind``: windows in which the API server could not be reached (``Starts``)."""
    result = StartsResult()
    rows = starts.launching(conn, limit=limit)
    result.launching = len(rows)
    if not rows:
        return result
    at = clock.now(conn, now)
    for row, job, pods in verdicts.with_jobs(kube, rows):
        found = seen(job, pods) if job else None
        if found is not None:
            _apply(conn, row, found, at, result, blind)
    return result


def _blind_after(since: datetime, blind: Sequence[tuple[datetime, datetime]]) -> timedelta:
    """How much of the ``blind`` windows falls after ``since``."""
    return sum((end - max(start, since) for start, end in blind if end > since), start=timedelta())


def _apply(
    conn: Connection,
    row: Obj,
    found: Seen,
    at: datetime,
    result: StartsResult,
    blind: Sequence[tuple[datetime, datetime]],
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
    if found.awaiting_admission:
        setting, seconds = "admissionTimeoutSeconds", starts.admission_timeout(row["spec"])
        counted_from = row["started_at"]
    else:
        setting, seconds = "startTimeoutSeconds", starts.start_timeout(row["spec"])
        counted_from = admitted_at or row["started_at"]
    unseen = _blind_after(counted_from, blind)
    bound = counted_from + timedelta(seconds=seconds) + unseen
    if found.hopeless or at >= bound:
        reason = _ENDS_AS.get(str(found.reason), starts.START_TIMEOUT)
        why = "can never start" if found.hopeless else f"did not start within {setting} ({seconds})"
        if unseen and not found.hopeless:
            why += (
                f", not counting {unseen.total_seconds():.0f} s when the API server could not"
                " be reached"
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
        bound_at=bound,
        announce=found.reason in _ENDS_AS,
        now=at,
    )
    if stored is not None:
        result.waiting[row["id"]] = str(found.reason)
        if found.reason != row["waiting_reason"]:
            log_run.info("run %s: launching: %s (%s)", row["id"], found.reason, found.message)
