"""Resync records Job outcomes the watch missed, against the real API server."""

from __future__ import annotations

import pytest

from devenv.waiting import wait_for
from factories import RecordingLauncher, define
from k8sfixtures import job_settings
from pgsched.engine import dispatch, runs
from pgsched.k8s.client import api
from pgsched.k8s.jobside import jobs, resync

pytestmark = pytest.mark.cluster


@pytest.fixture
def kube(cluster):
    return api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))


def launch(conn, kube, namespace, command, name):
    job = define(
        conn,
        name,
        namespace=namespace,
        schedule="0 0 1 1 *",
        jobTemplate={
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1.36",
                                "command": ["sh", "-c", command],
                            }
                        ]
                    }
                }
            }
        },
    )
    runs.run_now(conn, job.id, token="t")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    manifest = jobs.build(job, run, job_settings("ghcr.io/pgsched/pgsched:dev"))
    # No heartbeat sidecar: this test is about the Job's outcome alone. And no owner: there
    # is no ScheduledJob object here, and the garbage collector deletes orphans.
    manifest["spec"]["template"]["spec"].pop("initContainers")
    manifest["metadata"].pop("ownerReferences")
    kube.create(api.path_of(group="batch", namespace=namespace, plural="jobs"), manifest)
    conn.execute(
        "UPDATE pgsched.job_runs SET k8s_job_name = %s WHERE id = %s",
        [manifest["metadata"]["name"], run.id],
    )
    return run, manifest["metadata"]["name"]


def job_finished(kube, namespace, name):
    job = kube.get(api.path_of(group="batch", namespace=namespace, plural="jobs", name=name))
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in job.get("status", {}).get("conditions", [])
    )


def test_resync_records_finished_jobs_and_vanished_ones(conn, kube, namespace):
    succeeded, succeeded_job = launch(conn, kube, namespace, "true", "fine")
    failed, failed_job = launch(conn, kube, namespace, "exit 7", "broken")
    vanished, vanished_job = launch(conn, kube, namespace, "sleep 60", "vanishing")
    for name in (succeeded_job, failed_job):
        wait_for(
            lambda name=name: job_finished(kube, namespace, name),
            60,
            describe=f"Job {name} to finish",
        )
    kube.delete(api.path_of(group="batch", namespace=namespace, plural="jobs", name=vanished_job))

    result = resync.run_once(conn, kube, min_age_seconds=0)

    assert result.recorded == {
        succeeded.id: "COMPLETED",
        failed.id: "FAILED",
        vanished.id: "FAILED",
    }
    rows = {row["id"]: row for row in conn.execute("SELECT * FROM pgsched.job_runs")}
    assert (rows[failed.id]["reason"], rows[failed.id]["exit_code"]) == ("NonZeroExit", 7)
    assert rows[vanished.id]["reason"] == "JobDeleted"
    assert resync.run_once(conn, kube, min_age_seconds=0).recorded == {}


def test_resync_runs_on_one_replica_at_a_time(conn, kube, dsn):
    from pgsched.db import connection

    with connection.connect(dsn) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended('pgsched:resync', 0))")
        assert resync.run_once(conn, kube).skipped
        # Released explicitly: a closed session's locks go away only once its backend exits.
        other.execute("SELECT pg_advisory_unlock(hashtextextended('pgsched:resync', 0))")
    assert not resync.run_once(conn, kube).skipped
