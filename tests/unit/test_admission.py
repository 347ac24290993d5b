"""What the admission webhook refuses: exactly what the controller would, with its words,
and never an unchanged spec or a runAt that was accepted before (k8s/serve/admission.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest

from pgsched import spec as spec_module
from pgsched.k8s.serve import admission, webhook

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"template": {"spec": {"containers": []}}}}


def job(spec: dict[str, Any], name: str = "report") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "jobs",
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "spec": {**spec, "jobTemplate": TEMPLATE},
    }


def refused(new: dict[str, Any], old: dict[str, Any] | None = None) -> str:
    with pytest.raises(spec_module.SpecError) as error:
        admission.check_scheduled_job(new, old, now=NOW)
    return str(error.value)


def controller_says(body: dict[str, Any]) -> str:
    """The message of the controller's Ready=False condition (scheduledjobs._reconcile)."""
    with pytest.raises(spec_module.SpecError) as error:
        spec_module.parse(
            dict(body["spec"]),
            hash_seed="jobs/report",
            anchor=datetime(2026, 12, 1, tzinfo=UTC),
            now=NOW,
            run_at_not_before=NOW,
        )
    return str(error.value)


@pytest.mark.parametrize(
    "spec",
    [
        {"schedule": "61 * * * *"},
        {"schedule": "0 8 * * *", "timeZone": "Mars/Olympus"},
        {"rrule": "FREQ=DAILY;BYHOUR=25"},
        {"schedule": "0 8 * * *", "rrule": "FREQ=DAILY"},
        {"runAt": "2020-01-01T09:00:00Z"},
        {"schedule": "0 8 * * *", "retryPolicy": {"maxAttempts": 0}, "catchUp": "sometimes"},
    ],
    ids=["cron", "zone", "rrule", "both-kinds", "past-run-at", "several-fields"],
)
def test_a_new_invalid_scheduled_job_is_refused_with_the_controllers_message(spec):
    body = job(spec)
    assert refused(body) == controller_says(body)


def test_the_message_names_the_field_the_problem_and_an_example():
    message = refused(job({"schedule": "0 8 * * *", "timeZone": "Mars/Olympus"}))
    assert message.startswith("spec.timeZone: ")
    assert "Mars/Olympus" in message and "(example: " in message


def test_a_valid_scheduled_job_passes():
    admission.check_scheduled_job(job({"schedule": "H 8 * * MON-FRI"}), None, now=NOW)


def test_an_update_that_leaves_the_spec_alone_always_passes():
    """A GitOps re-sync, the operator's finalizer patch, an annotation: even for a spec
    that slipped in while the webhook was down."""
    slipped = job({"schedule": "61 * * * *"})
    annotated = {**slipped, "metadata": {**slipped["metadata"], "annotations": {"a": "b"}}}
    admission.check_scheduled_job(annotated, slipped, now=NOW)


def test_an_update_that_changes_an_invalid_spec_is_judged_again():
    slipped = job({"schedule": "61 * * * *"})
    still_bad = job({"schedule": "61 * * * *", "suspend": True})
    assert refused(still_bad, slipped).startswith("spec.schedule: ")


def test_a_past_run_at_is_refused_only_when_it_is_new():
    accepted = job({"runAt": "2020-01-01T09:00:00Z", "runAtInPast": "Run"})
    admission.check_scheduled_job(accepted, None, now=NOW)
    # Kept (a finished one-shot re-applied, the opt-in dropped): not new, passes.
    kept = job({"runAt": " 2020-01-01T09:00:00Z"})
    admission.check_scheduled_job(kept, accepted, now=NOW)
    # Moved, still in the past: new, refused as on create.
    moved = job({"runAt": "2021-01-01T09:00:00Z"})
    assert refused(moved, accepted).startswith("spec.runAt: '2021-01-01T09:00:00Z' is ")
    # From another schedule kind to a past runAt: new.
    assert refused(moved, job({"schedule": "0 8 * * *"})).startswith("spec.runAt: ")


def test_a_pool_without_a_positive_limit_is_refused_as_the_controller_logs_it():
    for limit in (0, -1, "2", True, None):
        with pytest.raises(spec_module.SpecError) as error:
            admission.check_pool({"spec": {"limit": limit}}, None)
        assert str(error.value).startswith("spec.limit: must be an integer of at least 1, got ")
        assert str(error.value).endswith("(example: limit: 2)")
    admission.check_pool({"spec": {"limit": 3}}, None)
    admission.check_pool({"spec": {"limit": 0}}, {"spec": {"limit": 0}})  # unchanged


def test_the_handlers_answer_with_an_admission_error_or_let_the_request_through(caplog):
    """kopf's handlers: an invalid spec becomes kopf.AdmissionError (422, the message); a
    failure of the check itself allows the request, as failurePolicy Ignore would."""
    registry = webhook.registry()
    handlers = {handler.id: handler.fn for handler in registry._webhooks.get_all_handlers()}
    assert set(handlers) == {
        "scheduledjobs",
        "concurrencypools",
        "calendars",
        "notificationpolicies",
    }
    bad = job({"schedule": "61 * * * *"})
    with pytest.raises(kopf.AdmissionError) as error:
        handlers["scheduledjobs"](body=kopf.Body(bad), old=None)
    assert error.value.code == 422
    assert str(error.value) == controller_says(bad)

    broken = {"metadata": {"name": "x", "namespace": "jobs", "creationTimestamp": "yesterday"}}
    with caplog.at_level(logging.ERROR):
        handlers["scheduledjobs"](body=kopf.Body(broken), old=None)
    assert "allowed (the controller still validates it)" in caplog.text


def test_kopf_remembers_nothing_of_the_objects_it_admits():
    memories = webhook._Forgetful()
    body = {"metadata": {"uid": "1", "name": "x", "namespace": "jobs"}}
    asyncio.run(memories.recall(body))
    assert list(memories.iter_all_memories()) == []


def test_a_calendar_the_controller_would_refuse_is_refused_at_apply():
    bad = {"spec": {"exclude": {"dates": ["2027-02-30"], "rules": ["FREQ=HOURLY"]}}}
    with pytest.raises(spec_module.SpecError) as error:
        admission.check_calendar(bad, None)
    assert [line.split(":")[0] for line in str(error.value).splitlines()] == [
        "spec.exclude.dates[0]",
        "spec.exclude.rules[0]",
    ]
    admission.check_calendar(bad, bad)  # unchanged: a re-sync, a finalizer patch
    # The import is the controller's to read: its reference alone is checked here.
    feed = {"spec": {"exclude": {"ics": {"configMapRef": {"name": "feed", "key": "x.ics"}}}}}
    admission.check_calendar(feed, None)
