"""The job side's own record in the cluster, and what it proves after failovers.

With asynchronous replication a failover loses the database's last commits: a run's
claim, its end, a run-now request's run, even the run's whole row. The database cannot
testify to what it forgot, so these checks read the witnesses it does not control:

- the Jobs (``JobRecorder``: every Job ever created, with the run id, ScheduledJob,
  occurrence and attempt it was launched for);
- the pods (``PodRecorder``): which Jobs' workload containers really started. The
  workload is busybox ``sleep``: it never reads the cancel file, so a second execution
  of the same work cannot be stopped cooperatively, only avoided;
- the run-now requests the operator acknowledged (it removed the annotation, which is
  what ``pgsched run-now`` waits for).

Violations (``failover_violations``): the same run's workload started by two Jobs, or one
occurrence's by two runs (I1, duplicate executions); a Job whose run row is missing from
the final table (I3, a run lost); a succeeded Job whose run is not COMPLETED is I8 already
(``clusterchaos.succeeded_work_violations``); an acknowledged run-now request without its
run (I3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from devenv.adminclient import AdminClient, Obj
from devenv.watching import reflect_in_background
from pgsched.db.connection import Connection
from pgsched.k8s import names

# The Job controller's label on its pods: the uid of the Job that owns them.
_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"


@dataclass(frozen=True)
class Launched:
    """What a Job says it was launched for."""

    run_id: int
    name: str  # the Job's name
    scheduled_job: str
    scheduled_for: str
    attempt: str
    lease: str  # the fingerprint of the lease it was launched with
    request_token: str = ""  # the run-now request it was queued for, if any


class JobRecorder:
    """Every Job of the namespace ever seen: uid → what it was launched for (run id,
    lease fingerprint, occurrence…), the runs whose Job was seen to succeed, and when each
    run's Job was first seen finished (or deleted): from then on the outcome is on record
    in the API."""

    def __init__(self, api: AdminClient, namespace: str) -> None:
        self.launched: dict[str, Launched] = {}  # uid → what it was created for
        self.succeeded: set[int] = set()
        self.recorded: dict[int, float] = {}  # run id → epoch seconds
        self._stop = reflect_in_background(
            api,
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            handler=self._seen,
            name="chaos-jobs",
            query={"labelSelector": names.LABEL_RUN_ID},
        )

    def launches(self) -> list[tuple[int, str]]:
        """(run id, lease fingerprint) of every Job seen."""
        return [(job.run_id, job.lease) for job in self.launched.values()]

    def _seen(self, event_type: str, job: Obj) -> None:
        metadata = job["metadata"]
        run_id = int(metadata["labels"][names.LABEL_RUN_ID])
        labels, annotations = metadata["labels"], metadata.get("annotations") or {}
        self.launched.setdefault(
            metadata["uid"],
            Launched(
                run_id=run_id,
                name=metadata["name"],
                scheduled_job=labels.get(names.LABEL_SCHEDULED_JOB, ""),
                scheduled_for=annotations.get(names.ANNOTATION_SCHEDULED_FOR, ""),
                attempt=labels.get(names.LABEL_ATTEMPT, ""),
                lease=names.job_lease_fingerprint(annotations) or "",
                request_token=annotations.get(names.ANNOTATION_REQUEST_TOKEN, ""),
            ),
        )
        conditions = (job.get("status") or {}).get("conditions") or []
        done = {c.get("type") for c in conditions if c.get("status") == "True"}
        if "Complete" in done:
            self.succeeded.add(run_id)
        if event_type == "DELETED" or done & {"Complete", "Failed"}:
            self.recorded.setdefault(run_id, time.time())

    def stop(self) -> None:
        self._stop.set()  # the watch thread is a daemon; it ends with its stream


class PodRecorder:
    """Job uid → when its pod's ``container`` was first seen started (epoch seconds), and
    when it ended as kubelet reported it (``finishedAt``, to the second)."""

    def __init__(self, api: AdminClient, namespace: str, *, container: str = "main") -> None:
        self.started: dict[str, float] = {}
        self.ended: dict[str, datetime] = {}
        self._container = container
        self._stop = reflect_in_background(
            api,
            f"/api/v1/namespaces/{namespace}/pods",
            handler=self._seen,
            name="chaos-pods",
            query={"labelSelector": _CONTROLLER_UID},
        )

    def _seen(self, event_type: str, pod: Obj) -> None:
        job_uid = (pod["metadata"].get("labels") or {}).get(_CONTROLLER_UID)
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != self._container:
                continue
            state = status.get("state") or {}
            last = status.get("lastState") or {}
            if any(
                (found or {}).get("startedAt")
                for found in (state.get("running"), state.get("terminated"), last.get("terminated"))
            ):
                self.started.setdefault(str(job_uid), time.time())
            finished = (state.get("terminated") or {}).get("finishedAt")
            if finished:
                self.ended[str(job_uid)] = datetime.fromisoformat(finished.replace("Z", "+00:00"))

    def stop(self) -> None:
        self._stop.set()  # a daemon thread: it ends with its stream


def failover_violations(
    conn: Connection,
    jobs: dict[str, Launched],
    started: dict[str, float],
    requests: list[tuple[str, str]],
) -> dict[str, list[str]]:
    """``jobs``: Job uid → what it was launched for; ``started``: the Job uids whose
    workload started; ``requests``: (ScheduledJob name, token) of every run-now request the
    operator acknowledged."""
    rows = {
        row["id"]: row
        for row in conn.execute(
            "SELECT id, status, reason FROM pgsched.job_runs WHERE id = ANY(%s)",
            [sorted({job.run_id for job in jobs.values()})],
        )
    }
    return {
        "I1": duplicate_executions(jobs, started),
        "I3": [
            f"run {job.run_id}: its Job {job.name} (for {job.scheduled_job} at"
            f" {job.scheduled_for}, attempt {job.attempt}"
            f"{', its workload started' if uid in started else ''}) exists, its row does"
            " not: the run was lost"
            for uid, job in sorted(jobs.items(), key=lambda item: item[1].run_id)
            if job.run_id not in rows
        ]
        + lost_requests(conn, requests),
    }


def duplicate_executions(jobs: dict[str, Launched], started: dict[str, float]) -> list[str]:
    by_run: dict[int, list[str]] = {}
    by_occurrence: dict[tuple[str, str, str], set[int]] = {}
    by_request: dict[tuple[str, str, str], set[int]] = {}
    for uid in started:
        job = jobs.get(uid)
        if job is None:
            continue
        by_run.setdefault(job.run_id, []).append(job.name)
        key = (job.scheduled_job, job.scheduled_for, job.attempt)
        by_occurrence.setdefault(key, set()).add(job.run_id)
        if job.request_token:
            # A run-now request's run and the new primary's redo of it (the kept
            # annotation) have different times: the token is what they share.
            request = (job.scheduled_job, job.request_token, job.attempt)
            by_request.setdefault(request, set()).add(job.run_id)
    problems = [
        f"run {run_id}: its workload was started by {len(names)} Jobs ({', '.join(names)})"
        for run_id, names in sorted(by_run.items())
        if len(names) > 1
    ]
    problems += [
        f"{scheduled_job} at {scheduled_for} (attempt {attempt}) was executed by"
        f" {len(run_ids)} runs: {sorted(run_ids)}"
        for (scheduled_job, scheduled_for, attempt), run_ids in sorted(by_occurrence.items())
        if len(run_ids) > 1
    ]
    problems += [
        f"{scheduled_job}'s run-now request {token} (attempt {attempt}) was executed by"
        f" {len(run_ids)} runs: {sorted(run_ids)}"
        for (scheduled_job, token, attempt), run_ids in sorted(by_request.items())
        if len(run_ids) > 1
    ]
    return problems


def lost_requests(conn: Connection, requests: list[tuple[str, str]]) -> list[str]:
    # The operator queues an annotation's run under the token "annotation:<value>".
    found = {
        (row["name"], row["request_token"].removeprefix("annotation:"))
        for row in conn.execute(
            "SELECT d.name, r.request_token FROM pgsched.job_runs AS r"
            " JOIN pgsched.job_definitions AS d ON d.id = r.definition_id"
            " WHERE r.request_token = ANY(%s)",
            [[f"annotation:{token}" for _, token in requests]],
        )
    }
    return [
        f"run-now request {token} of {name} was acknowledged (its annotation removed), and"
        " no run of it exists"
        for name, token in requests
        if (name, token) not in found
    ]
