"""What a notification's body says to each target type (pgsched.k8s.notifications.receivers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgsched.k8s.notifications import receivers

HOSTILE_ERROR = "<!channel> pay at <http://evil.example/|https://bank.example/> & <@U024BE7LH>"


def payload(*, reason: str = "NonZeroExit", error: str = HOSTILE_ERROR) -> dict[str, Any]:
    return {
        "event": "failed",
        "idempotencyKey": "k-1",
        "occurredAt": "2026-06-01T22:31:00+00:00",
        "scheduledJob": {"namespace": "data", "name": "export", "uid": "u-1"},
        "run": {
            "id": 1042,
            "attempt": 1,
            "status": "FAILED",
            "scheduledFor": "2026-06-01T22:30:00+00:00",
            "reason": reason,
            "error": error,
        },
    }


def slack_text(body: dict[str, Any]) -> str:
    raw, content_type = receivers.body_of("Slack", body)
    assert content_type == "application/json"
    return str(json.loads(raw)["text"])


def test_slack_text_escapes_what_mrkdwn_would_read_as_a_mention_or_a_link():
    """A job's error (or reason, or any text it carries) cannot ping a channel or show one
    link in place of another: Slack reads <…> as a control sequence, so &, < and > are
    sent as &amp;, &lt; and &gt;, as its formatting rules say."""
    text = slack_text(payload(reason="Evil<!here>"))
    assert "<" not in text and ">" not in text
    assert "&lt;!channel&gt;" in text and "&lt;!here&gt;" in text
    assert "&lt;http://evil.example/|https://bank.example/&gt;" in text
    assert "&amp; &lt;@U024BE7LH&gt;" in text
    assert text.startswith("pgsched: data/export run 1042 (attempt 1,")


def test_slack_text_without_special_characters_is_unchanged():
    plain = payload(error="exit code 3")
    assert slack_text(plain) == receivers.message(plain)
    assert slack_text(plain).endswith("failed: NonZeroExit: exit code 3")


@pytest.mark.parametrize("kind", ["Webhook", "CloudEvents"])
def test_json_targets_get_the_text_as_it_is(kind):
    """Tooling reads JSON, not mrkdwn: it gets the job's own text."""
    raw, _ = receivers.body_of(kind, payload())
    document = json.loads(raw)
    message = document["message"] if kind == "Webhook" else document["data"]["message"]
    assert HOSTILE_ERROR in message


def test_times_in_the_text_are_utc_to_the_second_and_the_fields_keep_their_precision():
    body = payload(error="exit code 3")
    body["run"]["scheduledFor"] = "2026-06-02T01:30:00.426113+03:00"
    assert "scheduled for 2026-06-01T22:30:00Z)" in receivers.message(body)
    raw, _ = receivers.body_of("Webhook", body)
    assert json.loads(raw)["run"]["scheduledFor"] == "2026-06-02T01:30:00.426113+03:00"
