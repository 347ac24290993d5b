"""Runs whose rows an asynchronous failover lost entirely run once, not twice.

A real streaming standby stops receiving WAL; on the primary a one-shot occurrence and a
run-now run are created, claimed and launched as Jobs on the real node. The primary is
killed and the standby promoted: the new primary has no row for either. It queues the same
work again (the one-shot's ``next_run_at`` was rolled back; the run-now annotation, kept
until the request is durable, is carried out again), but its dispatcher waits for the
timeline's failover pass, which restores both runs from their Jobs under their old ids
and skips the duplicates (k8s/failover/restoration.py, migration 0034). Each run ends with its
Job's outcome, and each ScheduledJob has one Job, whose pod ran once. A Job and lease
Secret a tenant made up for a run id the database lost restore nothing.
"""

from __future__ import annotations

import base64
import time
import uuid

import pytest
import yaml

from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s import names
from plugins.operator import Failover, ScheduledJobs, busybox, now_plus
from standby import promote, wait_caught_up

pytestmark = pytest.mark.cluster

HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 300}
WITHIN_SECONDS = 60
FORGED_RUN_ID = 1000  # an id of the first timeline's block the primary never reached
FORGED_JOB = names.job_name("manual", FORGED_RUN_ID)


def completed(found: list[dict]) -> bool:
    return len(found) == 1 and found[0]["status"] == "COMPLETED"


def restored(run_id: int):
    """Predicate: run ``run_id`` COMPLETED, every other run skipped as its duplicate."""

    def check(found: list[dict]) -> bool:
        ended = {run["id"]: (run["status"], run["reason"]) for run in found}
        others = {state for key, state in ended.items() if key != run_id}
        return ended.get(run_id) == ("COMPLETED", None) and others <= {
            ("SKIPPED", "DuplicateOfRestoredRun")
        }

    return check


def forge(cluster: ControlPlane, sj: ScheduledJobs, owner: dict) -> None:
    """A Job and lease Secret as the operator would make them for run FORGED_RUN_ID, with a
    lease the database never issued (suspended: its pod never starts)."""
    token = uuid.uuid4()
    name = FORGED_JOB
    metadata = owner["metadata"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": sj.namespace,
            "labels": {
                names.LABEL_RUN_ID: str(FORGED_RUN_ID),
                names.LABEL_SCHEDULED_JOB: "manual",
                names.LABEL_ATTEMPT: "1",
            },
            "annotations": {
                names.ANNOTATION_LEASE_SHA256: names.lease_fingerprint(str(token)),
                names.ANNOTATION_SCHEDULED_FOR: "2026-12-01T00:00:00+00:00",
                names.ANNOTATION_TRIGGER: "manual",
                names.ANNOTATION_REQUEST_TOKEN: "forged",
            },
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": names.KIND,
                    "name": "manual",
                    "uid": metadata["uid"],
                }
            ],
        },
        "spec": {"suspend": True, **busybox("true")["spec"]},
    }
    job["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": names.lease_secret_name(name), "namespace": sj.namespace},
        "data": {names.LEASE_SECRET_KEY: base64.b64encode(str(token).encode()).decode()},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([job, secret]))


def test_runs_whose_rows_a_failover_lost_are_restored_from_their_jobs_and_run_once(
    cluster: ControlPlane, namespace: str, operators_over_standby: Failover
) -> None:
    primary, standby, group = operators_over_standby
    group.start(PGSCHED_RESYNC_INTERVAL_SECONDS="600")
    with connection.connect(primary.dsn()) as conn:
        sj = ScheduledJobs(cluster, namespace, conn)
        work = {"heartbeat": HEARTBEAT, "jobTemplate": busybox("sleep 5")}
        sj.apply("once", {"runAt": now_plus(20), **work})
        manual = sj.apply("manual", {"schedule": "0 0 1 1 *", **work})
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM pgsched.job_definitions WHERE namespace = %s",
                    [namespace],
                ).fetchone()["n"]
                == 2
            ),
            30,
            describe="both definitions stored",
        )
        wait_caught_up(primary, standby)
        standby.stop()  # from here on the standby misses everything
        sj.annotate("manual", names.ANNOTATION_RUN_NOW, "once")
        # Created, claimed, launched and ended: all in the WAL the failover loses.
        [occurrence] = sj.wait_runs("once", completed, 90, "the one-shot completed")
        [requested] = sj.wait_runs("manual", completed, 90, "the run-now run completed")
        forge(cluster, sj, manual)
    primary.kill()
    standby.start()
    promote(standby)
    promoted = time.monotonic()

    with connection.connect(standby.dsn()) as conn:
        sj = ScheduledJobs(cluster, namespace, conn)
        for name, run in (("once", occurrence), ("manual", requested)):
            sj.wait_runs(name, restored(run["id"]), WITHIN_SECONDS, f"{name} restored")
        seconds = time.monotonic() - promoted
        print(f"\nboth lost runs restored and COMPLETED {seconds:.1f}s after the promotion")
        time.sleep(5)  # time for a second execution, if anything were to start one
        for name, run in (("once", occurrence), ("manual", requested)):
            runs = sj.runs(name)
            assert restored(run["id"])(runs), runs
            row = next(found for found in runs if found["id"] == run["id"])
            assert (row["trigger"], row["scheduled_for"], row["lease_token"]) == (
                run["trigger"],
                run["scheduled_for"],
                run["lease_token"],
            )
            [job] = [job for job in sj.jobs(name) if job["metadata"]["name"] != FORGED_JOB]
            assert job["metadata"]["name"] == names.job_name(name, run["id"])
            assert job["status"].get("succeeded") == 1  # one pod, ran once
            assert not job["status"].get("failed")
        duplicates = [
            found["id"]
            for name in ("once", "manual")
            for found in sj.runs(name)
            if found["reason"] == "DuplicateOfRestoredRun"
        ]
        print(f"duplicates the new primary queued and the restore skipped: {duplicates}")
        forged = conn.execute(
            "SELECT count(*) AS n FROM pgsched.job_runs WHERE id = %s OR request_token = 'forged'",
            [FORGED_RUN_ID],
        ).fetchone()
        assert forged["n"] == 0
    wait_for(
        lambda: any("restored from Job" in handle.log() for handle in group.started),
        10,
        describe="the operator's log line about the restored runs",
    )
