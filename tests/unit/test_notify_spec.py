"""spec.notify and spec.deadline: validated in the one path the operator, the admission
webhook and the CLI share (``pgsched.spec.parse``); every bad field is named, with what is
wrong and a valid example, and the CRD's schema agrees on the fields."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from pgsched import spec
from pgsched.engine import notifications

NOW = datetime(2026, 6, 1, tzinfo=UTC)
CRD = Path(__file__).parents[2] / "crds" / "scheduledjobs.pgsched.dev.yaml"
HOOK = {
    "name": "team",
    "type": "Webhook",
    "url": "https://hooks.example.com/pgsched",
    "signingSecretRef": {"name": "pgsched-notify", "key": "hmac"},
}


def parse(**fields):
    return spec.parse({"schedule": "0 8 * * *", **fields}, anchor=NOW, now=NOW)


def errors_of(**fields):
    with pytest.raises(spec.SpecError) as caught:
        parse(**fields)
    return {error.path: error for error in caught.value.errors}


def test_a_full_notify_spec_and_deadline_are_accepted_and_kept():
    notify = {
        "failedOn": "EachAttempt",
        "targets": [
            HOOK,
            {"name": "chat", "type": "Slack", "urlSecretRef": {"name": "slack", "key": "url"}},
            {
                "name": "bus",
                "type": "CloudEvents",
                "url": "http://broker.events/",
                "events": ["failed"],
            },
        ],
    }
    parsed = parse(notify=notify, deadline="06:00")
    assert parsed.extra["notify"] == notify and parsed.extra["deadline"] == "06:00"


@pytest.mark.parametrize(
    ("fields", "path", "complaint"),
    [
        ({"notify": {"targets": []}}, "spec.notify.targets", "non-empty list"),
        (
            {"notify": {"targets": [HOOK], "failedOn": "Sometimes"}},
            "spec.notify.failedOn",
            "not one of",
        ),
        (
            {"notify": {"targets": [{**HOOK, "type": "Email"}]}},
            "spec.notify.targets[0].type",
            "not one of",
        ),
        (
            {"notify": {"targets": [{**HOOK, "name": "Team!"}]}},
            "spec.notify.targets[0].name",
            "not a target name",
        ),
        ({"notify": {"targets": [HOOK, HOOK]}}, "spec.notify.targets[1].name", "named twice"),
        (
            {"notify": {"targets": [{**HOOK, "url": "ftp://x"}]}},
            "spec.notify.targets[0].url",
            "http(s) URL",
        ),
        (
            {"notify": {"targets": [{**HOOK, "url": "https://user:pw@x.example/"}]}},
            "spec.notify.targets[0].url",
            "without credentials",
        ),
        (
            {"notify": {"targets": [{**HOOK, "urlSecretRef": {"name": "a", "key": "b"}}]}},
            "spec.notify.targets[0]",
            "exactly one of url or urlSecretRef",
        ),
        (
            {"notify": {"targets": [{k: v for k, v in HOOK.items() if k != "signingSecretRef"}]}},
            "spec.notify.targets[0].signingSecretRef",
            "required for a Webhook",
        ),
        (
            # A reference names a key in the job's own namespace: no namespace field.
            {
                "notify": {
                    "targets": [
                        {
                            **HOOK,
                            "signingSecretRef": {
                                "name": "s",
                                "key": "k",
                                "namespace": "kube-system",
                            },
                        }
                    ]
                }
            },
            "spec.notify.targets[0].signingSecretRef",
            "in the ScheduledJob's namespace",
        ),
        (
            {"notify": {"targets": [{**HOOK, "events": ["exploded"]}]}},
            "spec.notify.targets[0].events",
            "each one of",
        ),
        ({"notify": {"targets": [HOOK], "extra": 1}}, "spec.notify.extra", "unknown field"),
        ({"deadline": "tomorrow"}, "spec.deadline", "neither a duration"),
        ({"deadline": "25:00"}, "spec.deadline", "neither a duration"),
        ({"deadline": "0h"}, "spec.deadline", "between 1s and 7 days"),
        ({"deadline": "200h"}, "spec.deadline", "between 1s and 7 days"),
        ({"deadline": 7200}, "spec.deadline", "must be a string"),
    ],
)
def test_a_bad_field_is_named_with_an_example(fields, path, complaint):
    errors = errors_of(**fields)
    assert path in errors, errors
    assert complaint in errors[path].message and errors[path].example


def test_the_crd_schema_knows_the_same_notify_fields():
    document = yaml.safe_load(CRD.read_text())
    fields = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    target = fields["notify"]["properties"]["targets"]["items"]["properties"]
    assert set(target) == {"name", "type", "url", "urlSecretRef", "signingSecretRef", "events"}
    assert target["events"]["items"]["enum"] == list(notifications.EVENTS)
    assert fields["deadline"]["type"] == "string"


def test_the_example_is_a_valid_spec():
    path = Path(__file__).parents[2] / "examples" / "nightly-export-notify.yaml"
    [_, job] = yaml.safe_load_all(path.read_text())
    parsed = spec.parse(job["spec"], anchor=NOW, now=NOW)
    assert [target["name"] for target in parsed.extra["notify"]["targets"]] == [
        "oncall",
        "team-chat",
    ]
