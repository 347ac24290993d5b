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
