"""Job clean-up: Jobs whose runs ended go, beyond what the history limits keep.

For each ScheduledJob whose runs ended (the outbox publisher calls this for the
definitions of a batch with terminal changes, inside the batch's transaction, so a failed
deletion rolls the batch back and the clean-up is retried with it — at least once):

- an active Job whose run the engine ended (reaped, cancel grace expired, or a run that
  recorded its own end and whose pod overstays ``JOB_EXIT_GRACE``) is deleted, so its pod
  stops;
- finished Jobs beyond ``successfulRunsHistoryLimit`` / ``failedRunsHistoryLimit`` are
  deleted, newest kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from pgsched import logs
from pgsched.db.connection import Connection
from pgsched.engine import runs, starts
from pgsched.engine.models import Definition
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


@dataclass
class CleanupResult:
    definitions: int = 0
    deleted: int = 0


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    definitions: Iterable[Definition],
    *,
    now: datetime | None = None,
) -> CleanupResult:
    result = CleanupResult()
    for definition in definitions:
        result.definitions += 1
        _clean_up(conn, kube, definition, result, now=now)
    return result


def _clean_up(
    conn: Connection,
    kube: api.KubeApi,
    definition: Definition,
    result: CleanupResult,
    *,
    now: datetime | None,
) -> None:
    collection = api.path_of(group="batch", namespace=definition.namespace, plural="jobs")
    selector = f"{names.LABEL_SCHEDULED_JOB}={names.label_value(definition.name)}"
    items = kube.get(collection, labelSelector=selector).get("items") or []
    owned = [job for job in items if _owned_by(job, definition.id)]
    run_ids = [int(job["metadata"]["labels"][names.LABEL_RUN_ID]) for job in owned]
    known = runs.endings(conn, run_ids, now=now)
    doomed: list[Obj] = []
    finished: dict[bool, list[Obj]] = {True: [], False: []}
    for job in owned:
        ending = known.get(int(job["metadata"]["labels"][names.LABEL_RUN_ID]))
        conditions = {
            c["type"]
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        }
        if conditions & {"Complete", "SuccessCriteriaMet"}:
            finished[True].append(job)
        elif conditions & {"Failed", "FailureTarget"}:
            finished[False].append(job)
        elif must_stop(ending, definition) and job["metadata"].get("deletionTimestamp") is None:
            doomed.append(job)
    spec = definition.spec
    limits = {
        True: spec.get("successfulRunsHistoryLimit", SUCCESSFUL_RUNS_HISTORY_LIMIT),
        False: spec.get("failedRunsHistoryLimit", FAILED_RUNS_HISTORY_LIMIT),
    }
    for succeeded, jobs in finished.items():
        jobs.sort(key=lambda job: job["metadata"].get("creationTimestamp", ""), reverse=True)
        doomed += [
            job
            for job in jobs[int(limits[succeeded]) :]
            if job["metadata"].get("deletionTimestamp") is None
        ]
    for job in doomed:
        try:
            kube.delete(f"{collection}/{job['metadata']['name']}")
        except api.ApiError as error:
            if not error.not_found:
                raise
        labels = job["metadata"].get("labels") or {}
        logs.for_labels(
            log,
            run_id=labels.get(names.LABEL_RUN_ID),
            namespace=definition.namespace,
            name=definition.name,
            attempt=labels.get(names.LABEL_ATTEMPT),
        ).info("deleted Job %s/%s", definition.namespace, job["metadata"]["name"])
    result.deleted += len(doomed)


# The CRD's defaults, for a spec stored before the API server applied them
# (tests/unit/test_spec_defaults.py keeps them equal).
SUCCESSFUL_RUNS_HISTORY_LIMIT = 3
FAILED_RUNS_HISTORY_LIMIT = 1
# Reasons the engine gives runs it ends itself: their pods may still be running, and must not.
# LaunchFailed: a Job was created but the launch failed (e.g. a pod template the namespace's
# Pod Security refuses, k8s.jobside.launcher): it is deleted after the run is ended, so the Job watch
# cannot see its deletion first and call it JobDeleted.
# A run whose workload could not start (engine.starts.REASONS) leaves a pod pulling, waiting
# for a node or suspended: it goes too. So does the suspended Job of a run an admission queue
# evicted (k8s.jobside.verdicts), before the queue admits it again and the workload starts over.
ENGINE_ENDED = frozenset(
    {"HeartbeatLost", "Orphaned", "DeadlineExceeded", "LaunchFailed", "Evicted", *starts.REASONS}
)
# A job that recorded its own end (the SDK runner) exits right after; give its pod this long
# before deleting its Job, so the Job completes normally and keeps its history and logs.
JOB_EXIT_GRACE = timedelta(seconds=30)


def must_stop(ending: runs.Ending | None, definition: Definition) -> bool:
    """Whether a still-active Job must be deleted because its run has ended."""
    if ending is None or ending.status in ("QUEUED", "RUNNING") or ending.finished_at is None:
        return False
    if ending.reason in ENGINE_ENDED:
        return True
    if ending.status == "CANCELLED" and ending.cancel_requested_at is not None:
        waited = ending.finished_at - ending.cancel_requested_at
        if waited >= timedelta(seconds=definition.cancel_grace_seconds):
            return True  # ended by the engine after the cancel grace: stop the pod now
    return ending.checked_at - ending.finished_at > JOB_EXIT_GRACE


def _owned_by(job: Obj, uid: UUID) -> bool:
    return any(
        ref.get("uid") == str(uid) for ref in job.get("metadata", {}).get("ownerReferences") or []
    )
