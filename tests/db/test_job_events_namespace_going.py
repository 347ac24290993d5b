"""The Job watch during a namespace's deletion: one question about the namespace, not one
per run, and no pod reads for runs its deletion cancels.

Deleting a namespace of 200 running runs deletes their pods, so their Jobs fail, all at
once. Each run's end used to read its Job's pods and ask whether the namespace was going:
400 urgent requests, ahead of every other namespace's launches and statuses
(``bench namespace_deletion``). The first answer is remembered (``k8s.client.endings``);
a Job that did not succeed in a namespace seen going ends its run CANCELLED by the
namespace's deletion whatever its pods say, so they are not read. The API server here is
an in-memory one that answers what a real one does and counts what it is asked.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, define
from pgsched.db import connection
from pgsched.engine import dispatch, runs
from pgsched.engine.models import Run
from pgsched.k8s import names
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.client.watch import Event
from pgsched.k8s.jobside import jobevents

NAMESPACE = "team-going"
CREATED = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
DELETION_BEGAN = CREATED + timedelta(minutes=5)


class GoingNamespace:
    """The API server of a namespace being deleted: its Jobs' pods, each one's main
    container ended with ``exit_code``; every path it was asked for, in order."""

    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code
        self.asked: list[str] = []
        self.endings = NamespaceEndings()

    def get(self, path: str, **params):
        self.asked.append(path)
        if path == f"/api/v1/namespaces/{NAMESPACE}":
            stamp = DELETION_BEGAN.strftime("%Y-%m-%dT%H:%M:%SZ")
            return {"metadata": {"name": NAMESPACE, "deletionTimestamp": stamp}}
        assert path == f"/api/v1/namespaces/{NAMESPACE}/pods", path
        ended = {"terminated": {"exitCode": self.exit_code, "reason": "Error"}}
        return {"items": [{"status": {"containerStatuses": [{"name": "main", "state": ended}]}}]}


def job_of(run: Run, condition: str) -> dict:
    return {
        "metadata": {
            "name": f"job-{run.id}",
            "namespace": NAMESPACE,
            "uid": f"uid-{run.id}",
            "creationTimestamp": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {names.LABEL_RUN_ID: str(run.id)},
            "annotations": {
                names.ANNOTATION_LEASE_SHA256: names.lease_fingerprint(run.lease_token)
            },
        },
        "status": {"conditions": [{"type": condition, "status": "True"}]},
    }


def launched(conn, count: int) -> list[Run]:
    job = define(conn, "job", namespace=NAMESPACE, schedule="0 0 1 1 *", maxConcurrentRuns=count)
    for index in range(count):
        runs.run_now(conn, job.id, token=f"t{index}")
    claimed = dispatch.run_once(conn, RecordingLauncher()).claimed
    assert len(claimed) == count
    return sorted(claimed, key=lambda run: run.id)


def test_runs_a_namespace_deletion_fails_cost_one_question_and_no_pod_reads(dsn, conn):
    failing = launched(conn, 3)
    kube = GoingNamespace(exit_code=137)
    with connection.pool(dsn, name="pgsched-test-pool", max_size=2) as pool:
        for run in failing:
            event = Event("MODIFIED", job_of(run, "Failed"))
            assert jobevents.record(pool, kube, event) is None  # type: ignore[arg-type]

    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    # The first run's end reads its pods and asks about the namespace; the others neither.
    assert kube.asked == [pods, f"/api/v1/namespaces/{NAMESPACE}"]
    for run in failing:
        ended = runs.get(conn, run.id)
        assert ended is not None
        assert (ended.status, ended.reason) == ("CANCELLED", "Cancelled"), ended
        assert ended.cancelled_by == runs.BY_NAMESPACE_DELETION
        assert (ended.error or "").startswith(f"stopped by the deletion of namespace {NAMESPACE}")


def test_a_job_that_succeeded_as_its_namespace_went_keeps_its_pods_exit_code(dsn, conn):
    first, done = launched(conn, 2)
    kube = GoingNamespace(exit_code=0)
    with connection.pool(dsn, name="pgsched-test-pool", max_size=2) as pool:
        jobevents.record(pool, kube, Event("MODIFIED", job_of(first, "Failed")))  # type: ignore[arg-type]
        asked = len(kube.asked)
        jobevents.record(pool, kube, Event("MODIFIED", job_of(done, "Complete")))  # type: ignore[arg-type]

    assert kube.asked[asked:] == [f"/api/v1/namespaces/{NAMESPACE}/pods"]
    ended = runs.get(conn, done.id)
    assert ended is not None and (ended.status, ended.exit_code) == ("COMPLETED", 0)
