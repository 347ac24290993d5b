"""Outcomes lost in an asynchronous failover are read again from Kubernetes, at once.

A real streaming standby stops receiving WAL (asynchronous loss from then on), the runs
go on on the primary — claimed, launched on the real node, finished, their ends recorded
— then the primary is killed and the standby promoted. On the new primary those runs are
as the standby last saw them: one RUNNING whose Job has finished, one QUEUED whose claim
and Job came after. The operator, seeing the new WAL timeline, compares them with their
Jobs once (k8s/failover/revalidation.py): both end COMPLETED from their Jobs within seconds, long
before ``heartbeat.timeoutSeconds`` (300 s) or the resync (600 s here) would, and neither
workload runs again.
"""

from __future__ import annotations

import time

import pytest

from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s import names
from plugins.operator import Failover, ScheduledJobs, busybox
from standby import promote, wait_caught_up

pytestmark = pytest.mark.cluster

HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 300}
# Well below the heartbeat timeout and the resync interval: only the revalidation can.
WITHIN_SECONDS = 30


def completed(found: list[dict]) -> bool:
    return len(found) == 2 and all(run["status"] == "COMPLETED" for run in found)


def test_runs_whose_end_and_claim_a_failover_lost_complete_from_their_jobs_once(
    cluster: ControlPlane, namespace: str, operators_over_standby: Failover
) -> None:
    primary, standby, group = operators_over_standby
    group.start(PGSCHED_RESYNC_INTERVAL_SECONDS="600")
    with connection.connect(primary.dsn()) as conn:
        sj = ScheduledJobs(cluster, namespace, conn)
        sj.apply(
            "lost",
            {
                "schedule": "0 0 1 1 *",
                "maxConcurrentRuns": 1,
                "heartbeat": HEARTBEAT,
                "jobTemplate": busybox("sleep 6"),
            },
            annotations={names.ANNOTATION_RUN_NOW: "first"},
        )
        sj.wait_runs(
            "lost",
            lambda found: found and found[0]["k8s_job_name"] is not None,
            60,
            "the first run launched",
        )
        sj.annotate("lost", names.ANNOTATION_RUN_NOW, "second")
        sj.wait_runs("lost", lambda found: len(found) == 2, 30, "the second run queued")
        wait_caught_up(primary, standby)
        standby.stop()  # from here on the standby misses everything
        # On the primary: the first run ends, the second is claimed, runs and ends.
        sj.wait_runs("lost", completed, 120, "both runs completed on the primary")
    primary.kill()
    standby.start()
    promote(standby)
    promoted = time.monotonic()

    with connection.connect(standby.dsn()) as conn:
        sj = ScheduledJobs(cluster, namespace, conn)
        [first, second] = sj.runs("lost")
        assert (first["status"], second["status"]) == ("RUNNING", "QUEUED")  # as lost
        sj.wait_runs("lost", completed, WITHIN_SECONDS, "both runs completed from their Jobs")
        seconds = time.monotonic() - promoted
        print(f"\nboth runs COMPLETED from their Jobs {seconds:.1f}s after the promotion")
        time.sleep(5)  # time for a second execution, if anything were to start one
        runs = sj.runs("lost")
        assert [(run["id"], run["status"], run["attempt"]) for run in runs] == [
            (first["id"], "COMPLETED", 1),
            (second["id"], "COMPLETED", 1),
        ]
        assert runs[1]["k8s_job_name"] == names.job_name("lost", second["id"])
        jobs = sj.jobs("lost")
        assert sorted(job["metadata"]["name"] for job in jobs) == sorted(
            names.job_name("lost", run["id"]) for run in runs
        )
        for job in jobs:  # each workload ran once: one pod, succeeded
            assert job["status"].get("succeeded") == 1
            assert not job["status"].get("failed")
        timelines = conn.execute(
            "SELECT timeline, finished_at IS NOT NULL AS finished"
            " FROM pgsched.timeline_revalidations ORDER BY timeline"
        ).fetchall()
        assert [(row["timeline"], row["finished"]) for row in timelines] == [
            (1, True),
            (2, True),
        ]
    wait_for(
        lambda: any("its end may have been lost" in handle.log() for handle in group.started),
        10,
        describe="the operator's log line about the lost end",
    )
