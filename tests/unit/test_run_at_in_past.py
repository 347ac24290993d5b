"""A runAt in the past is rejected when it is applied, unless runAtInPast: Run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgsched import spec

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def parse(run_at, **fields):
    return spec.parse(
        {"runAt": run_at, "jobTemplate": TEMPLATE, **fields},
        hash_seed="ns/job",
        anchor=NOW,
        now=NOW,
        run_at_not_before=NOW,
    )


def test_a_typo_in_the_year_is_rejected_with_the_field_how_far_back_and_the_way_out():
    with pytest.raises(spec.SpecError) as caught:
        parse("2025-06-01T09:00:00Z")
    [error] = caught.value.errors
    assert error.path == "spec.runAt"
    assert error.message == (
        "'2025-06-01T09:00:00Z' is 365 days in the past (now 2026-06-01T09:00:00Z), so it"
        " would run at once; fix the date, or set runAtInPast: Run to run it now on purpose"
    )
    assert error.example == "runAt: '2026-06-02T09:00:00Z'"


def test_run_at_in_past_run_opts_in_and_a_minute_of_slack_is_allowed():
    assert parse("2025-06-01T09:00:00Z", runAtInPast="Run").schedule_kind == "once"
    assert parse("2026-06-01T08:59:10Z").schedule_kind == "once"  # 50 s: an apply in flight


def test_an_accepted_run_at_is_not_checked_again_and_the_policy_is_validated():
    accepted = spec.parse(
        {"runAt": "2025-06-01T09:00:00Z", "jobTemplate": TEMPLATE},
        anchor=NOW,
        now=NOW,
        run_at_not_before=None,  # the operator stored this very runAt before
    )
    assert accepted.schedule_kind == "once"
    with pytest.raises(spec.SpecError) as caught:
        parse("2027-01-01T00:00:00Z", runAtInPast="Later")
    assert caught.value.errors[0].path == "spec.runAtInPast"
