"""A runAt in the past (a typo in the year) is rejected, not run; opting in runs it; a
one-shot accepted before does not turn invalid once its time has passed."""

from __future__ import annotations

import pytest

from devenv.waiting import wait_for
from plugins.operator import busybox, now_plus

pytestmark = pytest.mark.cluster


def ready(sj, name):
    conditions = (sj.get(name).get("status") or {}).get("conditions") or []
    return next((item for item in conditions if item["type"] == "Ready"), None)


def test_a_past_run_at_is_rejected_and_nothing_runs(operators, sj):
    operators.start()
    sj.apply("typo", {"runAt": "2025-01-01T09:00:00Z", "jobTemplate": busybox("true")})
    condition = wait_for(
        lambda: (found := ready(sj, "typo")) and found["status"] == "False" and found,
        30,
        describe=lambda: f"Ready=False: {sj.get('typo').get('status')}",
    )
    assert condition["reason"] == "InvalidSpec"
    assert "runAt: '2025-01-01T09:00:00Z' is " in condition["message"]
    assert "set runAtInPast: Run" in condition["message"]
    assert sj.runs("typo") == []
    assert "InvalidSpec" in {event["reason"] for event in sj.events("typo")}


def test_opting_in_runs_it_and_an_accepted_one_shot_stays_valid_once_past(operators, sj):
    operators.start()
    sj.apply(
        "late",
        {"runAt": "2025-01-01T09:00:00Z", "runAtInPast": "Run", "jobTemplate": busybox("true")},
    )
    sj.apply("soon", {"runAt": now_plus(2), "jobTemplate": busybox("true")})
    for name in ("late", "soon"):
        sj.wait_runs(name, lambda found: found and found[0]["status"] == "COMPLETED", 60, "the run")

    # An hour later (the operator's clock moved on), any reconcile validates the spec
    # again with its runAt long past: here a run-now annotation (a resume does the same).
    operators.stop_all()
    operators.start(PGSCHED_CLOCK_OFFSET_SECONDS="3600")
    sj.annotate("soon", "pgsched.dev/run-now", "again")

    sj.wait_runs("soon", lambda found: len(found) == 2, 30, "the manual run")
    assert ready(sj, "soon")["status"] == "True", sj.get("soon")["status"]
