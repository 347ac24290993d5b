"""`kubectl delete sj` while a run is running: the finalizer stops the run cooperatively
(cancel file first, the Job only after cancelGraceSeconds), and the history stays."""

from __future__ import annotations

import time

import pytest

from cli_runner import pgsched
from devenv.waiting import wait_for
from pgsched.engine import runs
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

FAST_HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 5, "orphanTimeoutSeconds": 30}
POLITE = (
    'while [ ! -f "$PGSCHED_CANCEL_FILE" ]; do sleep 0.2; done;'
    ' echo "stopping: $(cat $PGSCHED_CANCEL_FILE)"; sleep 2'
)


def start_running(sj, name, workload, grace):
    sj.apply(
        name,
        {
            "schedule": "0 0 1 1 *",
            "cancelGraceSeconds": grace,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox(workload),
        },
        annotations={"pgsched.dev/run-now": "go"},
    )
    [run] = sj.wait_runs(name, lambda found: found and found[0]["heartbeat_at"], 60, "a heartbeat")
    return run


def gone(cluster, namespace, name):
    result = cluster.kubectl("get", "sj", name, "-n", namespace, check=False)
    return result.returncode != 0 and "NotFound" in result.stderr


def test_deleting_a_scheduled_job_lets_its_run_stop_by_the_cancel_file_and_keeps_its_history(
    operators, sj, cluster, namespace, dsn
):
    operators.start()
    start_running(sj, "tidy", POLITE, grace=60)

    cluster.kubectl("delete", "sj", "tidy", "-n", namespace, "--wait=false")

    assert sj.get("tidy")["metadata"].get("deletionTimestamp")  # held while the run stops
    [done] = sj.wait_runs(
        "tidy", lambda found: found[0]["status"] == "CANCELLED", 30, "the cooperative stop"
    )
    assert done["cancelled_by"] == runs.BY_DELETION
    # the workload saw the cancel file and ended itself, noted by its sidecar (migration 0029; a workload
    # that ignored the request would end "did not stop within cancelGraceSeconds")
    assert done["error"] == "stopped after cancellation was requested (its workload ended)"
    wait_for(lambda: gone(cluster, namespace, "tidy"), 30, describe="the ScheduledJob to go")

    # The same name again is a new ScheduledJob; the old run keeps its id and stays listed.
    sj.apply("tidy", {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")})
    wait_for(
        lambda: (
            sj.conn.execute(
                "SELECT count(*) AS n FROM pgsched.job_definitions WHERE name = 'tidy'"
            ).fetchone()["n"]
            == 2
        ),
        30,
        describe="the re-created definition",
    )
    live = pgsched("runs", "tidy", "-n", namespace, dsn=dsn)
    everything = pgsched("runs", "tidy", "-n", namespace, "--include-deleted", dsn=dsn)
    # Compare run ids by the table's first column: the namespace in the output has digits.
    assert live.code == 0
    assert str(done["id"]) not in [line.split()[0] for line in live.out.splitlines() if line]
    assert everything.code == 0
    [row] = [line for line in everything.out.splitlines() if line.split()[0] == str(done["id"])]
    assert "Cancelled by Deletion" in row and "deleted" in row


def test_a_run_that_ignores_the_deletion_is_stopped_after_its_grace_then_the_sj_goes(
    operators, sj, cluster, namespace
):
    operators.start()
    start_running(sj, "stubborn", "trap '' TERM; sleep 300", grace=4)
    asked = time.monotonic()

    cluster.kubectl("delete", "sj", "stubborn", "-n", namespace, "--wait=false")

    wait_for(lambda: gone(cluster, namespace, "stubborn"), 40, describe="the ScheduledJob to go")
    took = time.monotonic() - asked
    [done] = sj.runs("stubborn")
    assert done["status"] == "CANCELLED" and done["cancelled_by"] == runs.BY_DELETION
    assert "did not stop within cancelGraceSeconds (4)" in done["error"]
    assert took >= 4, f"deleted after {took:.1f}s, before the run's grace ended"
    wait_for(lambda: sj.jobs("stubborn") == [], 60, describe="the Job to be deleted")
