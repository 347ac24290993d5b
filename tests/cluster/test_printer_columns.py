"""`kubectl get sj` tells the truth: READY, QUEUED, LAST STATUS of the newest started run
(RUNNING while it runs, never a skipped occurrence), LAST RUN its start for any trigger."""

from __future__ import annotations

import re

import pytest

from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster


def columns(cluster, namespace, name):
    """The row of ``kubectl get sj NAME`` by column title (cells start under their title)."""
    table = cluster.kubectl("get", "sj", name, "-n", namespace).stdout
    header, row = table.strip().splitlines()
    titles = [match.group() for match in re.finditer(r"\S+(?: \S+)*", header)]
    starts = [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]
    ends = [*starts[1:], None]
    return {
        title: row[start:end].strip()
        for title, start, end in zip(titles, starts, ends, strict=True)
    }


def test_a_manual_run_shows_as_running_with_its_start_and_a_queued_one_is_counted(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "manual",
        {
            "schedule": "0 0 1 1 *",
            "maxConcurrentRuns": 1,
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 10},
            # Running for the whole test, however slow the machine: ACTIVE 1 is asserted
            # after several round trips through the API server.
            "jobTemplate": busybox("sleep 300"),
        },
        annotations={"pgsched.dev/run-now": "first"},
    )
    [running] = sj.wait_runs(
        "manual", lambda found: found and found[0]["status"] == "RUNNING", 60, "the manual run"
    )
    sj.annotate("manual", "pgsched.dev/run-now", "second")
    sj.wait_runs("manual", lambda found: len(found) == 2, 30, "the queued run")
    # An occurrence skipped while the run is running (as concurrencyPolicy: Skip would).
    sj.conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, reason,"
        " finished_at) VALUES (%s, 'SKIPPED', 'schedule', now(), 'ConcurrencyPolicy', now())",
        [running["definition_id"]],
    )

    # LAST STATUS says RUNNING once the workload container started (LAUNCHING until then:
    # seconds on a busy node), which is what the wait is for, as a person would wait.
    shown = wait_for(
        lambda: (
            (cells := columns(cluster, namespace, "manual"))["QUEUED"] == "1"
            and cells["LAST STATUS"] == "RUNNING"
            and sj.get("manual")["status"].get("lastRunTime")
            and cells
        ),
        60,
        describe=lambda: f"the columns: {columns(cluster, namespace, 'manual')}",
    )
    status = sj.get("manual")["status"]

    assert shown["READY"] == "True"
    assert shown["ACTIVE"] == "1"
    assert shown["LAST STATUS"] == "RUNNING"
    assert shown["LAST RUN"].endswith("s")  # e.g. "3s": a manual run's start
    assert shown["LAST SCHEDULE"] == ""  # nothing scheduled yet: only manual runs
    assert status["lastRun"]["id"] == running["id"]
    assert status["lastRunTime"] == running["started_at"].strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_rejected_generation_shows_ready_false_and_why_with_wide_output(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply("typo", {"schedule": "61 * * * *", "jobTemplate": busybox("true")})
    wait_for(
        lambda: columns(cluster, namespace, "typo")["READY"] == "False",
        30,
        describe=lambda: f"READY False: {columns(cluster, namespace, 'typo')}",
    )
    wide = cluster.kubectl("get", "sj", "typo", "-n", namespace, "-o", "wide").stdout
    assert "MESSAGE" in wide.splitlines()[0] and "61" in wide.splitlines()[1]
