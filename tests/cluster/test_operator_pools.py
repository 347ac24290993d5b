"""Concurrency pools on the cluster: the limit seen from the API (Jobs with active pods),
the pool's printer columns, and a job waiting for a pool that does not exist yet."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster


def apply_pool(cluster, namespace: str, name: str, limit: int) -> None:
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ConcurrencyPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"limit": limit},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def condition(sj, name: str, kind: str) -> dict | None:
    found = [c for c in sj.get(name).get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else None


def test_a_pool_of_two_shared_by_four_jobs_never_has_three_jobs_running(
    operators, sj, cluster, namespace
):
    operators.start()
    operators.start()
    apply_pool(cluster, namespace, "warehouse", 2)
    names = [f"export-{index}" for index in range(4)]
    for name in names:
        sj.apply(
            name,
            {
                "schedule": "0 0 1 1 *",
                "pool": "warehouse",
                "maxConcurrentRuns": 2,
                "jobTemplate": busybox("sleep 3"),
            },
        )
    peak = {"jobs": 0, "columns": ""}
    stop = threading.Event()

    def watch_active_jobs() -> None:
        while not stop.is_set():
            jobs = json.loads(cluster.kubectl("get", "jobs", "-n", namespace, "-o", "json").stdout)
            active = sum(1 for job in jobs["items"] if (job.get("status") or {}).get("active"))
            peak["jobs"] = max(peak["jobs"], active)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_active_jobs)
    watcher.start()
    try:
        for name in names:
            for token in ("a", "b"):
                sj.annotate(name, "pgsched.dev/run-now", f"{name}-{token}")
        # While the eight runs drain two at a time, the pool's columns show it.
        peak["columns"] = wait_for(
            lambda: (
                (out := cluster.kubectl("get", "concurrencypools", "-n", namespace).stdout)
                and " 2 " in out.splitlines()[1]
                and out
            ),
            60,
            describe=lambda: "kubectl get concurrencypools to show the pool",
        )
        for name in names:
            sj.wait_runs(
                name,
                lambda runs: len(runs) == 2 and all(r["status"] == "COMPLETED" for r in runs),
                180,
                "both runs to complete",
            )
    finally:
        stop.set()
        watcher.join()

    assert peak["jobs"] == 2, peak  # the pool was full, and never over
    header, row = peak["columns"].splitlines()[:2]
    assert header.split()[:4] == ["NAME", "LIMIT", "RUNNING", "QUEUED"], header
    assert row.split()[:2] == ["warehouse", "2"], row
    intervals = [(run["started_at"], run["finished_at"]) for name in names for run in sj.runs(name)]
    for moment, _ in intervals:
        assert sum(1 for start, end in intervals if start <= moment < end) <= 2
    status = json.loads(
        cluster.kubectl("get", "cpool", "warehouse", "-n", namespace, "-o", "json").stdout
    )["status"]
    wait_for(
        lambda: (
            json.loads(
                cluster.kubectl("get", "cpool", "warehouse", "-n", namespace, "-o", "json").stdout
            )["status"]
            == {"running": 0, "queued": 0, "jobs": 4}
        ),
        30,
        describe=lambda: f"the pool's status to settle (was {status})",
    )


def test_a_job_naming_a_missing_or_deleted_pool_waits_with_a_condition(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "lonely",
        {"schedule": "0 0 1 1 *", "pool": "licence", "jobTemplate": busybox("true")},
        annotations={"pgsched.dev/run-now": "now"},
    )
    missing = wait_for(
        lambda: condition(sj, "lonely", "PoolReady"),
        60,
        describe=lambda: "the PoolReady condition",
    )
    assert (missing["status"], missing["reason"]) == ("False", "PoolNotFound")
    assert "ConcurrencyPool licence does not exist" in missing["message"]
    time.sleep(3)
    assert [run["status"] for run in sj.runs("lonely")] == ["QUEUED"]

    apply_pool(cluster, namespace, "licence", 1)

    sj.wait_runs(
        "lonely", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60, "the run to complete"
    )
    ready = wait_for(
        lambda: (
            (found := condition(sj, "lonely", "PoolReady")) and found["status"] == "True" and found
        ),
        60,
        describe=lambda: "PoolReady to turn True",
    )
    assert ready["reason"] == "PoolFound"

    # Deleted while the job still names it: the condition says so and new runs wait again.
    cluster.kubectl("delete", "cpool", "licence", "-n", namespace, "--wait=true")
    wait_for(
        lambda: (found := condition(sj, "lonely", "PoolReady")) and found["status"] == "False",
        60,
        describe=lambda: "PoolReady to turn False after the pool was deleted",
    )
    sj.annotate("lonely", "pgsched.dev/run-now", "again")
    sj.wait_runs("lonely", lambda runs: len(runs) == 2, 30, "the second run to be queued")
    time.sleep(3)
    assert [run["status"] for run in sj.runs("lonely")] == ["COMPLETED", "QUEUED"]
