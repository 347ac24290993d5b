"""The operator through outages: database and API server restarts mid-run (I1-I7)."""

from __future__ import annotations

import time

import pytest

from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.engine import dispatch, runs
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

FAST_HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 20, "orphanTimeoutSeconds": 60}


def test_a_database_outage_mid_run_loses_and_duplicates_nothing(
    cluster, crd, namespace, private_postgres, tmp_path
):
    from plugins.operator import Operators, ScheduledJobs

    dsn = private_postgres.dsn()
    group = Operators(cluster, dsn, namespace, tmp_path)
    replica = group.start(PGSCHED_RESYNC_INTERVAL_SECONDS="2")
    try:
        with connection.connect(dsn) as conn:
            sj = ScheduledJobs(cluster, namespace, conn)
            sj.apply(
                "steady",
                {
                    "schedule": "0 0 1 1 *",
                    "maxConcurrentRuns": 3,
                    "heartbeat": FAST_HEARTBEAT,
                    "jobTemplate": busybox("sleep 6"),
                },
            )
            for token in ("a", "b", "c"):
                sj.annotate("steady", "pgsched.dev/run-now", token)
                time.sleep(0.5)
            sj.wait_runs(
                "steady",
                lambda runs: len(runs) == 3 and all(r["status"] == "RUNNING" for r in runs),
                60,
                "three running runs",
            )

        # The database goes away for longer than the jobs have left to run: their Jobs
        # finish while nothing can be recorded, and heartbeats fail meanwhile.
        private_postgres.stop()
        time.sleep(8)
        private_postgres.start()

        with connection.connect(dsn) as conn:
            sj = ScheduledJobs(cluster, namespace, conn)
            sj.annotate("steady", "pgsched.dev/run-now", "after-restart")
            runs = sj.wait_runs(
                "steady",
                lambda runs: len(runs) == 4 and all(r["status"] == "COMPLETED" for r in runs),
                120,
                "every run, before and after the restart, to complete",
            )
            assert len({run["k8s_job_name"] for run in runs}) == 4
            assert (
                conn.execute(
                    "SELECT count(*) AS n FROM pgsched.job_runs WHERE status IN ('QUEUED', 'RUNNING')"
                ).fetchone()["n"]
                == 0
            )
        assert replica.process.poll() is None, "the operator must survive the restart"
        log = replica.log()
        assert (
            "tick failed, will retry" in log and "tick recovered after" in log
        )  # it said why it waited
        # Jobs finished during the outage; the Job watch recorded their outcomes once it
        # was over (its handlers wait for a live pooled connection, they do not fail on a
        # dead one and lose the event).
        for run in runs[:3]:
            assert f"run {run['id']}: Job {run['k8s_job_name']} ended, run COMPLETED" in log
    finally:
        group.stop_all()


@pytest.mark.exclusive  # restarts the API server under every test
def test_an_api_server_restart_mid_run_loses_and_duplicates_nothing(cluster, operators, sj):
    replica = operators.start(PGSCHED_RESYNC_INTERVAL_SECONDS="2")
    sj.apply(
        "through-api-restart",
        {
            "schedule": "0 0 1 1 *",
            "maxConcurrentRuns": 2,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox("sleep 5"),
        },
    )
    sj.annotate("through-api-restart", "pgsched.dev/run-now", "before")
    sj.wait_runs(
        "through-api-restart",
        lambda runs: runs and runs[0]["status"] == "RUNNING",
        60,
        "a running run",
    )

    cluster.restart_apiserver(downtime=3)

    sj.annotate("through-api-restart", "pgsched.dev/run-now", "after")
    runs = sj.wait_runs(
        "through-api-restart",
        lambda runs: len(runs) == 2 and all(r["status"] == "COMPLETED" for r in runs),
        120,
        "both runs to complete",
    )
    assert [run["attempt"] for run in runs] == [1, 1]
    jobs = {job["metadata"]["name"] for job in sj.jobs("through-api-restart")}
    assert jobs == {run["k8s_job_name"] for run in runs}
    assert replica.process.poll() is None
    wait_for(lambda: replica.healthy(), 30, describe="the operator to report healthy again")


@pytest.mark.exclusive  # stops the API server under every test
def test_a_job_that_succeeds_while_the_api_server_is_down_completes_and_is_never_retried(
    cluster, operators, sj
):
    """I8: the Job finishes while the operator cannot see it, its sidecar ends with the pod,
    heartbeat.timeoutSeconds passes. The run waits for its verdict instead of being failed
    HeartbeatLost and retried; once the API is back, the Job says Complete."""
    replica = operators.start()
    sj.apply(
        "unseen-success",
        {
            "schedule": "0 0 1 1 *",
            # HeartbeatLost is retried by default: a wrong verdict would show as attempt 2.
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 4, "orphanTimeoutSeconds": 60},
            "retryPolicy": {"backoff": {"initialSeconds": 1, "jitter": 0}},
            "jobTemplate": busybox("sleep 4"),
        },
    )
    sj.annotate("unseen-success", "pgsched.dev/run-now", "go")
    sj.wait_runs(
        "unseen-success", lambda runs: runs and runs[0]["heartbeat_at"], 60, "a first heartbeat"
    )

    cluster.stop_apiserver()
    try:
        [pending] = sj.wait_runs(
            "unseen-success",
            lambda runs: runs[0]["outcome_pending_at"] is not None,
            60,
            "the silent run to be marked as awaiting its verdict",
        )
        assert pending["status"] == "RUNNING"
        assert pending["workload_ended_at"] is not None, "the sidecar says the workload ended"
        time.sleep(6)  # well past the heartbeat timeout, still no API: nothing changes
        assert [(r["status"], r["attempt"]) for r in sj.runs("unseen-success")] == [("RUNNING", 1)]
    finally:
        cluster.start_apiserver()

    [run] = sj.wait_runs(
        "unseen-success",
        lambda runs: runs[0]["status"] != "RUNNING",
        90,
        "the verdict once the API is back",
    )
    assert (run["status"], run["reason"]) == ("COMPLETED", None)
    time.sleep(3)
    assert len(sj.runs("unseen-success")) == 1, "a succeeded run is never executed again"
    assert replica.process.poll() is None


def test_a_run_claimed_by_a_replica_killed_before_launching_it_is_launched_by_the_next_one(
    operators, sj, conn
):
    first = operators.start()
    sj.apply(
        "abandoned",
        {"schedule": "0 0 1 1 *", "heartbeat": FAST_HEARTBEAT, "jobTemplate": busybox("true")},
    )
    lookup = "SELECT id FROM pgsched.job_definitions WHERE namespace = %s AND name = %s"
    wait_for(
        lambda: conn.execute(lookup, [sj.namespace, "abandoned"]).fetchone() is not None,
        30,
        describe="the ScheduledJob stored",
    )
    first.kill()
    # What the killed replica's last tick did: it claimed a run (committed), and died before
    # creating its Job.
    [definition] = conn.execute(lookup, [sj.namespace, "abandoned"]).fetchall()
    runs.run_now(conn, definition["id"], token="claimed-then-killed")
    [claimed] = dispatch.claim(conn, definition_ids=[definition["id"]]).claimed

    successor = operators.start()
    [ended] = sj.wait_runs(
        "abandoned",
        lambda rows: len(rows) == 1 and rows[0]["status"] == "COMPLETED",
        120,
        "the abandoned claim to be launched and complete",
    )
    assert (ended["id"], ended["lease_token"]) == (claimed.id, claimed.lease_token)
    assert [job["metadata"]["name"] for job in sj.jobs("abandoned")] == [ended["k8s_job_name"]]
    assert f"run {claimed.id}: claimed at" in successor.log()
    assert "never launched" in successor.log()
