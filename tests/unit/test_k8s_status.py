"""ScheduledJob status rendered from the definition and its runs."""

from __future__ import annotations

from datetime import UTC, datetime

from k8sfixtures import T0, definition, run
from pgsched.k8s import status


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
