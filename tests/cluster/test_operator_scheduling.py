"""Scheduling on the cluster: time zones, caps across replicas, bad input, run-now."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import devenv
from devenv.commands import CommandError
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

SHIFTED_CLOCK = Path(devenv.__file__).parent / "shifted_clock"


def seconds_until(moment: datetime) -> float:
    return (moment - datetime.now(UTC)).total_seconds()


def start_with_shifted_clock(operators, clock_file: Path, offset_seconds: float):
    """A replica whose engine clock runs ``offset_seconds`` from the local one, or what
    ``clock_file`` says once rewritten (the product has no setting for it:
    devenv/shifted_clock/sitecustomize.py wraps the operator's entry)."""
    clock_file.write_text(str(offset_seconds))
    path = os.pathsep.join(p for p in (str(SHIFTED_CLOCK), os.environ.get("PYTHONPATH")) if p)
    return operators.start(PYTHONPATH=path, SHIFTED_CLOCK_FILE=str(clock_file))


def test_rrule_byhour_8_in_sofia_runs_at_eight_local_time(operators, sj, tmp_path):
    # The engine's clock at first an hour before 08:00 in Sofia on the next spring-forward
    # day (the rule is anchored at the resource's creation day, so the pin is in the future),
    # and moved to seconds before 08:00 only once the ScheduledJob is stored: a fixed
    # offset raced the operator's start on a loaded machine (started past 08:00, it made
    # the next day's run the first).
    target = datetime(2027, 3, 28, 8, 0, tzinfo=ZoneInfo("Europe/Sofia"))
    clock_file = tmp_path / "clock-offset"
    start_with_shifted_clock(operators, clock_file, seconds_until(target) - 3600)
    sj.apply(
        "standup",
        {
            "rrule": "FREQ=DAILY;BYHOUR=8",
            "timeZone": "Europe/Sofia",
            # The pod's sidecar heartbeats at the database's (real) time, which the pinned
            # clock sees as long ago: a real pod lives for seconds, so keep the reaper away.
            "heartbeat": {"timeoutSeconds": 10**9},
            "jobTemplate": busybox("true"),
        },
    )
    status = wait_for(
        lambda: sj.get("standup").get("status", {}).get("nextRunAt"), 60, describe="nextRunAt"
    )
    assert status == "2027-03-28T05:00:00Z"  # 08:00 EEST
    clock_file.write_text(str(seconds_until(target) - 5))

    [run] = sj.wait_runs(
        "standup", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60, "the 08:00 run"
    )
    local = run["scheduled_for"].astimezone(ZoneInfo("Europe/Sofia"))
    assert local.isoformat() == "2027-03-28T08:00:00+03:00"
    wait_for(
        lambda: (
            sj.get("standup")["status"]["nextRuns"][:2]
            == ["2027-03-29T05:00:00Z", "2027-03-30T05:00:00Z"]
        ),
        15,
        describe=lambda: f"the next runs after 08:00: {sj.get('standup')['status']}",
    )


def test_caps_hold_across_two_replicas_under_a_burst_of_run_now(operators, sj, cluster, namespace):
    operators.start()
    operators.start()
    sj.apply(
        "capped",
        {"schedule": "0 0 1 1 *", "maxConcurrentRuns": 2, "jobTemplate": busybox("sleep 4")},
    )
    for index in range(6):
        sj.annotate("capped", "pgsched.dev/run-now", f"burst-{index}")

    peak = {"jobs": 0}
    stop = threading.Event()

    def watch_active_jobs() -> None:
        while not stop.is_set():
            jobs = json.loads(cluster.kubectl("get", "jobs", "-n", namespace, "-o", "json").stdout)[
                "items"
            ]
            active = sum(1 for job in jobs if (job.get("status") or {}).get("active"))
            peak["jobs"] = max(peak["jobs"], active)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_active_jobs)
    watcher.start()
    try:
        runs = sj.wait_runs(
            "capped",
            lambda runs: len(runs) == 6 and all(r["status"] == "COMPLETED" for r in runs),
            120,
            "all six runs to complete",
        )
    finally:
        stop.set()
        watcher.join()
    assert peak["jobs"] <= 2
    # The extra runs waited QUEUED: the last ones started only after the first ones ended.
    starts = sorted(run["started_at"] for run in runs)
    ends = sorted(run["finished_at"] for run in runs)
    assert starts[2] >= ends[0]
    intervals = [(run["started_at"], run["finished_at"]) for run in runs]
    for moment, _ in intervals:
        assert sum(1 for start, end in intervals if start <= moment < end) <= 2


def test_the_same_run_now_token_twice_is_one_run(operators, sj):
    operators.start()
    sj.apply("once", {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")})
    sj.annotate("once", "pgsched.dev/run-now", "deploy-7")
    sj.wait_runs("once", lambda runs: len(runs) == 1, 30, "the manual run")
    sj.annotate("once", "pgsched.dev/run-now", "deploy-7")
    sj.apply("once", {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true"), "suspend": False})
    time.sleep(2)
    assert len(sj.runs("once")) == 1


def test_two_schedule_kinds_are_refused_at_apply(operators, sj):
    with pytest.raises(CommandError) as refused:
        sj.apply(
            "both", {"schedule": "* * * * *", "rrule": "FREQ=DAILY", "jobTemplate": busybox("true")}
        )
    assert "exactly one of schedule, rrule, runAt or schedules must be set" in str(refused.value)
    with pytest.raises(CommandError) as refused:
        sj.apply(
            "negative",
            {"schedule": "* * * * *", "maxConcurrentRuns": -1, "jobTemplate": busybox("true")},
        )
    assert "spec.maxConcurrentRuns" in str(refused.value)


def test_invalid_spec_is_not_ready_with_a_precise_message_and_others_keep_running(operators, sj):
    operators.start()
    sj.apply(
        "healthy",
        {"runAt": "2020-01-01T00:00:00Z", "runAtInPast": "Run", "jobTemplate": busybox("true")},
    )
    sj.apply("bad-cron", {"schedule": "61 * * * *", "jobTemplate": busybox("true")})
    sj.apply(
        "bad-zone",
        {"schedule": "* * * * *", "timeZone": "Europe/Sofiya", "jobTemplate": busybox("true")},
    )

    for name, message in (
        (
            "bad-cron",
            "spec.schedule: minute value 61 in '61' is out of range 0-59 (example: */15 * * * *)",
        ),
        ("bad-zone", "spec.timeZone: unknown time zone 'Europe/Sofiya'"),
    ):
        ready = wait_for(
            lambda name=name: next(
                c for c in sj.get(name)["status"]["conditions"] if c["type"] == "Ready"
            ),
            20,
            describe=f"{name} to get a Ready condition",
        )
        assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
        assert message in ready["message"]
        events = wait_for(
            lambda name=name: [e for e in sj.events(name) if e["reason"] == "InvalidSpec"],
            20,
            describe=f"an InvalidSpec Event for {name}",
        )
        assert message in events[0]["message"]
    assert sj.runs("bad-cron") == [] and sj.runs("bad-zone") == []
    sj.wait_runs(
        "healthy", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60, "the healthy job"
    )


def test_an_invalid_update_keeps_the_last_valid_generation_running(operators, sj):
    operators.start()
    sj.apply("evolving", {"schedule": "0 9 * * *", "jobTemplate": busybox("true")})
    wait_for(lambda: sj.get("evolving")["status"].get("nextRunAt"), 20, describe="a first status")
    sj.apply("evolving", {"schedule": "0 25 * * *", "jobTemplate": busybox("true")})
    ready = wait_for(
        lambda: next(
            c
            for c in sj.get("evolving")["status"]["conditions"]
            if c["type"] == "Ready" and c["status"] == "False"
        ),
        20,
        describe="Ready=False after the bad update",
    )
    assert "generation 2 was rejected: spec.schedule: hour value 25" in ready["message"]
    assert "generation 1 remains in force" in ready["message"]
    status = sj.get("evolving")["status"]
    assert status["observedGeneration"] == 2 and status["schedule"] == "0 9 * * *"
    sj.apply("evolving", {"schedule": "0 10 * * *", "jobTemplate": busybox("true")})
    wait_for(
        lambda: sj.get("evolving")["status"]["schedule"] == "0 10 * * *",
        20,
        describe="the fixed generation",
    )
    assert (
        next(c for c in sj.get("evolving")["status"]["conditions"] if c["type"] == "Ready")[
            "status"
        ]
        == "True"
    )
