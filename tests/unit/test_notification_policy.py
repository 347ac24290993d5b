"""NotificationPolicy and spec.notify's relation to it, validated in the one path the
controller and the admission webhook share (``spec.notification_policy``, and
``spec.parse`` for a ScheduledJob's spec.notify, which the CLI runs too): every bad field
named with what is wrong and a right example; hostile input refused promptly with a
bounded message; the CRD agrees on the fields and the one name."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hostile_specs import HOSTILE_POLICIES
from pgsched import spec
from pgsched.k8s.serve import admission
from unit.test_schedule_fuzz import FUZZ

NOW = datetime(2026, 6, 1, tzinfo=UTC)
ROOT = Path(__file__).parents[2]
HOOK = {
    "name": "oncall",
    "type": "Webhook",
    "url": "https://alerts.example.com/pgsched",
    "signingSecretRef": {"name": "pgsched-notify", "key": "hmac"},
}


def refusal(name, policy_spec):
    with pytest.raises(spec.SpecError) as caught:
        spec.notification_policy(name, policy_spec)
    return str(caught.value)


def job_errors(notify):
    with pytest.raises(spec.SpecError) as caught:
        spec.parse({"schedule": "0 8 * * *", "notify": notify}, anchor=NOW, now=NOW)
    return {error.path: error for error in caught.value.errors}


def test_a_policy_named_default_is_accepted_as_its_jobs_spec_notify():
    policy = {"failedOn": "EachAttempt", "targets": [HOOK]}
    assert spec.notification_policy("default", policy) == policy


@pytest.mark.parametrize("case", sorted(HOSTILE_POLICIES))
def test_a_hostile_policy_is_refused_promptly_naming_the_field_with_an_example(case):
    (name, policy_spec), expected = HOSTILE_POLICIES[case]
    started = time.monotonic()
    message = refusal(name, policy_spec)
    assert time.monotonic() - started < 1.0
    assert expected in message
    assert "(example: " in message
    assert len(message) < 1000  # it reaches a condition, an Event, kubectl's answer


def test_admission_refuses_what_the_controller_refuses_and_passes_an_unchanged_spec():
    bad = {"metadata": {"name": "default"}, "spec": {"targets": [{**HOOK, "type": "Email"}]}}
    with pytest.raises(spec.SpecError) as caught:
        admission.check_notification_policy(bad, None)
    assert str(caught.value) == refusal("default", bad["spec"])
    admission.check_notification_policy(bad, bad)  # a finalizer patch, a GitOps re-sync
    renamed = {"metadata": {"name": "team"}, "spec": {"targets": [HOOK]}}
    with pytest.raises(spec.SpecError, match=r"^metadata\.name: 'team'"):
        admission.check_notification_policy(renamed, None)


@pytest.mark.parametrize(
    ("notify", "path", "complaint"),
    [
        ({}, "spec.notify.targets", "or inherit: false, to send none"),
        ({"inherit": "no"}, "spec.notify.inherit", "must be true or false"),
        (
            {"inherit": False, "failedOn": "EachAttempt"},
            "spec.notify.failedOn",
            "has no effect",
        ),
        ({"inherit": True, "targets": []}, "spec.notify.targets", "non-empty list"),
        ({"inherit": True, "policy": "other"}, "spec.notify.policy", "unknown field"),
    ],
)
def test_a_bad_relation_to_the_policy_is_named_with_an_example(notify, path, complaint):
    errors = job_errors(notify)
    assert path in errors, errors
    assert complaint in errors[path].message and errors[path].example


@pytest.mark.parametrize(
    "notify",
    [
        {"inherit": False},  # the opt-out
        {"inherit": True},  # the policy's targets (explicitly)
        {"inherit": True, "failedOn": "EachAttempt"},  # ... each attempt
        {"inherit": True, "targets": [HOOK]},  # the policy's and its own
        {"inherit": False, "targets": [HOOK]},  # its own only, as without inherit
    ],
)
def test_the_ways_a_job_relates_to_its_namespaces_policy_are_accepted_and_kept(notify):
    parsed = spec.parse({"schedule": "0 8 * * *", "notify": notify}, anchor=NOW, now=NOW)
    assert parsed.extra["notify"] == notify


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_field = st.sampled_from(
    ["name", "type", "url", "urlSecretRef", "signingSecretRef", "events", "namespace"]
)
_target = st.dictionaries(
    _field, _json | st.sampled_from(["Webhook", "Slack", "https://x.example/"])
)
_policy = (
    st.fixed_dictionaries(
        {}, optional={"targets": st.lists(_target, max_size=12) | _json, "failedOn": _json}
    )
    | _json
)


@FUZZ
@given(name=st.sampled_from(["default", "x"]) | st.text(max_size=20), policy_spec=_policy)
def test_fuzzed_policies_are_accepted_or_refused_promptly_with_field_errors(name, policy_spec):
    started = time.monotonic()
    try:
        stored = spec.notification_policy(name, policy_spec)
    except spec.SpecError as error:
        assert error.errors and all(item.path and item.example for item in error.errors)
    else:
        assert name == "default" and stored["targets"]
    assert time.monotonic() - started < 1.0


@FUZZ
@given(notify=st.fixed_dictionaries({}, optional={"inherit": _json, "targets": _json}) | _json)
def test_fuzzed_spec_notify_is_accepted_or_refused_with_field_errors(notify):
    try:
        spec.parse({"schedule": "0 8 * * *", "notify": notify}, anchor=NOW, now=NOW)
    except spec.SpecError as error:
        assert all(item.path.startswith("spec.notify") for item in error.errors)


def test_the_crds_agree_on_the_fields_and_the_one_name():
    def schema(name):
        document = yaml.safe_load((ROOT / "crds" / name).read_text())
        return document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    policy = schema("notificationpolicies.pgsched.dev.yaml")
    job_notify = schema("scheduledjobs.pgsched.dev.yaml")["properties"]["spec"]["properties"][
        "notify"
    ]
    assert policy["properties"]["spec"]["properties"]["targets"] == {
        **job_notify["properties"]["targets"],
        "items": policy["properties"]["spec"]["properties"]["targets"]["items"],
    }
    target = policy["properties"]["spec"]["properties"]["targets"]["items"]["properties"]
    assert set(target) == set(job_notify["properties"]["targets"]["items"]["properties"])
    assert set(policy["properties"]["spec"]["properties"]) == {"failedOn", "targets"}
    assert set(job_notify["properties"]) == {"failedOn", "targets", "inherit"}
    assert "required" not in job_notify  # {inherit: false} alone is the opt-out
    # A schema default would be written into {inherit: false} by the API server (then
    # refused: failedOn without targets) and would hide the policy's failedOn.
    assert "default" not in job_notify["properties"]["failedOn"]
    [rule] = policy["x-kubernetes-validations"]
    assert rule["rule"] == "self.metadata.name == 'default'"


def test_the_example_validates_as_the_operator_reads_it():
    documents = list(
        yaml.safe_load_all((ROOT / "examples" / "team-notification-policy.yaml").read_text())
    )
    kinds = [document["kind"] for document in documents]
    assert kinds == ["Secret", "NotificationPolicy", "ScheduledJob", "ScheduledJob", "ScheduledJob"]
    policy = documents[1]
    assert spec.notification_policy(policy["metadata"]["name"], policy["spec"])["targets"]
    notifies = [
        spec.parse(job["spec"], anchor=NOW, now=NOW).extra.get("notify") for job in documents[2:]
    ]
    assert notifies[0] is None and notifies[1]["inherit"] is True
    assert notifies[2] == {"inherit": False}
