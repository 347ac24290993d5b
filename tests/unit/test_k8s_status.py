"""ScheduledJob status rendered from the definition and its runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from k8sfixtures import T0, definition, run
from pgsched.engine import chain
from pgsched.engine.models import Start
from pgsched.k8s.reporting import status


def conditions(rendered):
    return {item["type"]: item for item in rendered["conditions"]}


def test_status_shows_the_next_three_runs_in_utc_and_the_last_run():
    rendered = status.render(
        definition(), last_run=run(status="COMPLETED", finished_at=T0), active=0, now=T0
    )
    # 02:00 in Sofia (UTC+3 in June) is 23:00 UTC.
    assert rendered["nextRuns"] == [
        "2026-06-01T23:00:00Z",
        "2026-06-02T23:00:00Z",
        "2026-06-03T23:00:00Z",
    ]
    assert rendered["nextRunAt"] == "2026-06-01T23:00:00Z"
    assert rendered["lastRun"]["status"] == "COMPLETED" and rendered["lastRun"]["id"] == 42
    assert (rendered["schedule"], rendered["timeZone"], rendered["observedGeneration"]) == (
        "0 2 * * *",
        "Europe/Sofia",
        1,
    )
    assert conditions(rendered)["Ready"]["status"] == "True"
    assert conditions(rendered)["Suspended"]["status"] == "False"


def test_a_rule_whose_occurrences_are_all_past_is_ready_and_says_nothing_more_runs():
    finished = definition(
        schedule_kind="rrule",
        schedule="DTSTART:20200101T000000\nRRULE:FREQ=DAILY;COUNT=3",
        next_run_at=None,
    )
    rendered = status.render(finished, last_run=None, active=0, now=T0)
    ready = conditions(rendered)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "NoFutureOccurrences")
    assert "no occurrence after 2026-06-01" in ready["message"]
    assert rendered["nextRunAt"] is None and rendered["nextRuns"] == []
    suspended = conditions(rendered)["Suspended"]
    assert suspended["message"] == (
        "not suspended, but its schedule has no occurrence left: no more runs"
    )


def test_a_stored_schedule_this_release_rejects_renders_without_predictions():
    # An older release stored it; this one's validation refuses it (here: INTERVAL=0).
    stored = definition(schedule_kind="rrule", schedule="FREQ=DAILY;INTERVAL=0")
    rendered = status.render(stored, last_run=None, active=0, now=T0)
    assert rendered["nextRuns"] == [] and rendered["nextRunAt"] is None


def test_auto_suspension_is_a_condition_with_the_reason():
    suspended = definition(
        auto_suspended_at=T0,
        auto_suspend_reason="3 consecutive runs failed (failureSuspendThreshold is 3)",
    )
    rendered = status.render(suspended, last_run=None, active=0, now=T0)
    condition = conditions(rendered)["Suspended"]
    assert (condition["status"], condition["reason"]) == ("True", "TooManyFailures")
    assert "3 consecutive runs failed" in condition["message"]
    assert rendered["nextRuns"] == [] and rendered["suspended"] is True


def test_a_job_naming_a_missing_pool_says_so_and_one_without_a_pool_has_no_pool_condition():
    pooled = definition(spec={"pool": "warehouse"})
    missing = conditions(status.render(pooled, last_run=None, active=0, now=T0, pool_found=False))
    found = conditions(status.render(pooled, last_run=None, active=0, now=T0, pool_found=True))
    plain = conditions(status.render(definition(), last_run=None, active=0, now=T0))

    assert (missing["PoolReady"]["status"], missing["PoolReady"]["reason"]) == (
        "False",
        "PoolNotFound",
    )
    assert (
        "ConcurrencyPool warehouse does not exist in namespace jobs"
        in (missing["PoolReady"]["message"])
    )
    assert (found["PoolReady"]["status"], found["PoolReady"]["reason"]) == ("True", "PoolFound")
    assert "PoolReady" not in plain


def test_a_rejected_generation_is_not_ready_and_says_what_remains_in_force():
    rendered = status.render(
        definition(generation=3, rejected_generation=4, rejection="spec.timeZone: unknown"),
        last_run=None,
        active=0,
        now=T0,
    )
    ready = conditions(rendered)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "generation 3 remains in force" in ready["message"]
    assert rendered["observedGeneration"] == 4


def test_transition_times_are_kept_while_a_condition_holds():
    first = status.render(definition(), last_run=None, active=0, now=T0)
    later = datetime(2026, 6, 2, tzinfo=UTC)
    again = status.render(definition(), last_run=None, active=1, now=later, current=first)
    assert conditions(again)["Ready"]["lastTransitionTime"] == "2026-06-01T12:00:00Z"
    flipped = status.render(
        definition(suspended=True), last_run=None, active=0, now=later, current=first
    )
    assert conditions(flipped)["Suspended"]["lastTransitionTime"] == "2026-06-02T00:00:00Z"
    assert [item["type"] for item in status.transitions(first, flipped)] == ["Suspended"]


def test_rrule_and_one_shot_schedules_read_well_in_the_printer_column():
    assert (
        status.schedule_text("rrule", "DTSTART:20260101T080000\nRRULE:FREQ=DAILY;BYHOUR=8")
        == "FREQ=DAILY;BYHOUR=8"
    )
    assert status.schedule_text("once", "2026-12-24T18:00:00") == "once at 2026-12-24T18:00:00"


def test_a_chained_job_shows_its_upstreams_a_missing_one_and_the_chain_both_ways():
    chained = definition(schedule_kind="none", schedule="", after_mode="All", next_run_at=None)
    links = chain.Links(
        upstreams=[
            chain.UpstreamState("extract", "Succeeded", True),
            chain.UpstreamState("clean", "Finished", False),
        ],
        downstreams=["publish"],
    )
    rendered = status.render(
        chained,
        last_run=run(status="COMPLETED", trigger="upstream", upstream_run_id=7),
        active=0,
        now=T0,
        links=links,
        triggered=[chain.Triggered(42, 50, "publish", "QUEUED")],
    )
    assert rendered["schedule"] == "after extract, clean"
    [ready] = [c for c in rendered["conditions"] if c["type"] == "Ready"]
    # afterMode All with clean missing: no chained run can start, and it says which.
    assert (ready["status"], ready["reason"]) == ("False", "UpstreamMissing")
    assert ready["message"].startswith("spec.after names clean, which does not exist")
    assert rendered["nextRuns"] == []
    assert rendered["afterMode"] == "All" and rendered["downstreams"] == ["publish"]
    assert rendered["after"][1] == {"scheduledJob": "clean", "outcome": "Finished", "found": False}
    assert rendered["lastRun"]["upstreamRunId"] == 7
    assert rendered["lastRun"]["triggeredRuns"] == [
        {"scheduledJob": "publish", "runId": 50, "status": "QUEUED"}
    ]
    [found] = [c for c in rendered["conditions"] if c["type"] == "UpstreamsFound"]
    assert (found["status"], found["reason"]) == ("False", "UpstreamMissing")
    assert "clean, which does not exist in namespace jobs" in found["message"]


@pytest.mark.parametrize(
    ("mode", "schedule_kind", "found", "ready"),
    [
        ("Any", "none", [True, False], ("True", "Scheduled")),  # extract still chains it
        ("Any", "none", [False, False], ("False", "UpstreamMissing")),
        ("All", "none", [True, False], ("False", "UpstreamMissing")),
        ("All", "none", [True, True], ("True", "Scheduled")),  # not NoFutureOccurrences
        ("All", "cron", [False, False], ("True", "Scheduled")),  # it runs on its schedule
    ],
)
def test_a_chain_only_job_is_ready_unless_missing_upstreams_keep_every_run_from_starting(
    mode, schedule_kind, found, ready
):
    """As a missing pool does: a rejected cycle member (never stored, so missing) leaves
    the other member, which runs only after it, Ready=False, not Ready and idle for ever."""
    chained = definition(
        schedule_kind=schedule_kind,
        schedule="" if schedule_kind == "none" else "0 3 * * *",
        after_mode=mode,
        next_run_at=None if schedule_kind == "none" else T0 + timedelta(hours=1),
    )
    links = chain.Links(
        upstreams=[
            chain.UpstreamState(name, "Succeeded", here)
            for name, here in zip(["extract", "clean"], found, strict=True)
        ],
        downstreams=[],
    )
    rendered = status.render(chained, last_run=None, active=0, now=T0, links=links)
    [condition] = [c for c in rendered["conditions"] if c["type"] == "Ready"]
    assert (condition["status"], condition["reason"]) == ready


def test_last_run_time_is_the_start_of_the_last_run_whatever_its_trigger_and_queued_counts():
    started = datetime(2026, 6, 1, 12, 0, 7, tzinfo=UTC)  # seven seconds late
    rendered = status.render(
        definition(last_scheduled_for=None),
        last_run=run(status="RUNNING", trigger="manual", started_at=started),
        active=1,
        queued=2,
        now=T0,
    )
    assert (rendered["lastRunTime"], rendered["lastScheduleTime"]) == ("2026-06-01T12:00:07Z", None)
    assert (rendered["lastRun"]["status"], rendered["active"], rendered["queued"]) == (
        "RUNNING",
        1,
        2,
    )


def test_a_one_shot_is_completed_once_its_run_ended_and_nothing_is_queued_or_deciding():
    fired = definition(schedule_kind="once", schedule="2026-06-01T12:00:00Z", next_run_at=None)
    due = definition(schedule_kind="once", schedule="2026-06-01T23:00:00Z")
    done = run(status="COMPLETED", finished_at=T0, settled_at=T0)
    failing = run(status="FAILED", reason="NonZeroExit", finished_at=T0)

    def completed(of, **kwargs):
        rendered = status.render(of, active=0, now=T0, **kwargs)
        found = conditions(rendered)["Completed"]
        return found["status"], found["reason"]

    assert completed(due, last_run=None) == ("False", "Pending")
    assert completed(fired, last_run=done, queued=1) == ("False", "Pending")  # a retry waits
    assert completed(fired, last_run=failing) == ("False", "Pending")  # retry not decided yet
    assert completed(fired, last_run=done) == ("True", "Succeeded")
    assert completed(fired, last_run=run(status="FAILED", settled_at=T0)) == ("True", "Failed")
    assert completed(fired, last_run=None) == ("True", "NotRun")
    assert "Completed" not in conditions(
        status.render(definition(), last_run=done, active=0, now=T0)
    )


def test_a_run_whose_workload_has_not_started_is_launching_with_its_pods_reason():
    waiting = Start(
        run_id=42,
        workload_started_at=None,
        waiting_reason="CreateContainerConfigError",
        waiting_message='pod p, container main: secret "db" not found',
        awaiting_admission=False,
        admitted_at=None,
        bound_at=T0 + timedelta(seconds=300),
        observed_at=T0,
    )
    rendered = status.render(
        definition(), last_run=run(status="RUNNING"), active=1, now=T0, start=waiting
    )
    last = rendered["lastRun"]
    assert (last["status"], last["reason"]) == ("LAUNCHING", "CreateContainerConfigError")
    assert last["launching"]["until"] == "2026-06-01T12:05:00Z"
    assert last["launching"]["message"] == 'pod p, container main: secret "db" not found'
    assert conditions(rendered)["Launchable"]["status"] == "True"


def test_a_template_whose_last_run_could_not_start_is_not_launchable():
    failed = run(
        status="FAILED",
        reason="ImagePullFailed",
        error="the workload did not start within startTimeoutSeconds (300): ErrImagePull: x",
        finished_at=T0,
    )
    launchable = conditions(status.render(definition(), last_run=failed, active=0, now=T0))[
        "Launchable"
    ]
    assert (launchable["status"], launchable["reason"]) == ("False", "ImagePullFailed")
    assert launchable["message"].startswith("run 42 could not start: the workload did not start")


def test_a_job_naming_a_missing_pool_is_not_ready():
    """Issue 26: READY stayed True while PoolReady was False, though no run can start."""
    pooled = definition(spec={"pool": "warehouse"})
    missing = conditions(status.render(pooled, last_run=None, active=0, now=T0, pool_found=False))
    found = conditions(status.render(pooled, last_run=None, active=0, now=T0, pool_found=True))
    assert (missing["Ready"]["status"], missing["Ready"]["reason"]) == ("False", "PoolNotFound")
    assert missing["Ready"]["message"] == (
        "ConcurrencyPool warehouse does not exist in namespace jobs:"
        " no run of generation 1 can start until it does"
    )
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("True", "Scheduled")


def test_a_finished_one_shot_no_longer_says_it_is_scheduled():
    done = definition(
        schedule_kind="once",
        schedule="2026-06-01T09:00:00",
        next_run_at=None,
        last_scheduled_for=datetime(2026, 6, 1, 6, 0, tzinfo=UTC),
    )
    rendered = status.render(
        done, last_run=run(status="COMPLETED", finished_at=T0), active=0, now=T0
    )
    ready = conditions(rendered)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "NoFutureOccurrences")
    assert ready["message"] == (
        "generation 1 is valid and its one occurrence (2026-06-01T06:00:00Z) has come:"
        " no more runs (the Completed condition says how it ended)"
    )
    assert "is scheduled" not in str(rendered)


def test_a_rejected_job_that_runs_after_others_shows_them_in_the_schedule_column():
    """Issue 26: the member of a refused chain cycle showed an empty SCHEDULE column."""
    rendered = status.render_rejected(
        {"after": [{"scheduledJob": "extract"}, {"scheduledJob": "clean"}]},
        generation=1,
        message="spec.after: load → extract → load is a cycle",
        now=T0,
        current=None,
    )
    assert rendered["schedule"] == "after extract, clean"
    assert (
        status.render_rejected({}, generation=1, message="x", now=T0, current=None)["schedule"]
        == ""
    )
