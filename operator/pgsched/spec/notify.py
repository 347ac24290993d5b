"""``spec.notify`` and a NotificationPolicy's spec: where a job's failures are told.

The database reads both as stored: the notification trigger matches a run event against
the targets and their events, and delivery (``k8s.notifications.notifier``) posts to the
URL or the Secret a target names. A bad target found there would fail every notification
long after the apply that could have refused it, so everything is checked here — the
names, types and events, exactly one of ``url`` and ``urlSecretRef``, a signing Secret for
a generic webhook — each problem at its own path. The vocabulary (events, target types,
``failedOn``), the URL rule and the reading of a Secret reference are
``engine.notifications``'s, which delivery uses again at send time; this module only
applies them to what a user wrote. A NotificationPolicy's spec is a ``spec.notify``
without ``inherit``; ``other_kinds.notification_policy`` calls ``validate_policy``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pgsched.engine import notifications
from pgsched.spec.checker import Checker
from pgsched.validation import Problems

MAX_TARGETS = 10
_TARGET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_TARGET_EXAMPLE = (
    "{name: team, type: Webhook, url: 'https://hooks.example.com/pgsched',"
    " signingSecretRef: {name: pgsched-notify, key: hmac}}"
)
_EXAMPLE = f"notify: {{targets: [{_TARGET_EXAMPLE}]}}"
_POLICY_EXAMPLE = f"spec: {{targets: [{_TARGET_EXAMPLE}]}}"


def validate(check: Checker) -> None:
    """Check a ScheduledJob's ``spec.notify``, adding a problem per bad field (the trigger
    reads it as is). Besides the targets it may say how it relates to its namespace's
    NotificationPolicy: ``inherit: true`` adds the policy's targets, ``inherit: false``
    without targets opts out of it (docs/notifications.md, "A namespace's default")."""
    value, problems = check.spec.get("notify"), check.problems
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.add("spec.notify", "must be an object", _EXAMPLE)
        return
    _unknown(value, {"failedOn", "targets", "inherit"}, "spec.notify", problems)
    inherit = value.get("inherit")
    if inherit is not None and not isinstance(inherit, bool):
        problems.add(
            "spec.notify.inherit",
            f"must be true or false, got {_shown(inherit)}",
            "notify: {inherit: false}  # no notifications, not even the namespace's default",
        )
        return
    if inherit is False and "targets" not in value:
        if "failedOn" in value:
            problems.add(
                "spec.notify.failedOn",
                "has no effect: inherit: false without targets means no notifications",
                "notify: {inherit: false}",
            )
        return
    _targets_and_failed_on(
        value,
        "spec.notify",
        problems,
        optional=inherit is True,
        example=_EXAMPLE,
        alternative=" (or inherit: false, to send none)",
    )


def validate_policy(value: Any, problems: Problems) -> None:
    """Check a NotificationPolicy's ``spec``: the targets and ``failedOn`` of a
    ``spec.notify``, which the namespace's jobs without one use."""
    if not isinstance(value, Mapping):
        problems.add("spec", "must be an object", _POLICY_EXAMPLE)
        return
    _unknown(value, {"failedOn", "targets"}, "spec", problems, example=_POLICY_EXAMPLE)
    _targets_and_failed_on(value, "spec", problems, optional=False, example=_POLICY_EXAMPLE)


def _targets_and_failed_on(
    value: Mapping[str, Any],
    path: str,
    problems: Problems,
    *,
    optional: bool,
    example: str,
    alternative: str = "",
) -> None:
    failed_on = value.get("failedOn")
    if failed_on is not None and failed_on not in notifications.FAILED_ON:
        problems.add(
            f"{path}.failedOn",
            f"{_shown(failed_on)} is not one of {', '.join(notifications.FAILED_ON)}",
            "failedOn: EachAttempt",
        )
    targets = value.get("targets")
    if optional and targets is None:
        return
    if not isinstance(targets, list) or not targets:
        problems.add(
            f"{path}.targets", f"must be a non-empty list of targets{alternative}", example
        )
        return
    if len(targets) > MAX_TARGETS:
        problems.add(
            f"{path}.targets", f"names {len(targets)} targets, at most {MAX_TARGETS}", example
        )
        return
    seen: set[str] = set()
    for index, target in enumerate(targets):
        name = _target(target, f"{path}.targets[{index}]", problems)
        if name is not None and name in seen:
            problems.add(
                f"{path}.targets[{index}].name",
                f"{_shown(name)} is named twice",
                f"name: {name}-2",
            )
        if name is not None:
            seen.add(name)


def _target(target: Any, path: str, problems: Problems) -> str | None:
    if not isinstance(target, Mapping):
        problems.add(path, "must be an object", _EXAMPLE)
        return None
    _unknown(
        target,
        {"name", "type", "url", "urlSecretRef", "signingSecretRef", "events"},
        path,
        problems,
    )
    name = target.get("name")
    if not isinstance(name, str) or not _TARGET_NAME.match(name):
        problems.add(
            f"{path}.name",
            f"{_shown(name)} is not a target name (lowercase letters, digits and '-', at most 63)",
            "name: team-webhook",
        )
        name = None
    kind = target.get("type")
    if kind not in notifications.TARGET_TYPES:
        problems.add(
            f"{path}.type",
            f"{_shown(kind)} is not one of {', '.join(notifications.TARGET_TYPES)}",
            "type: Webhook",
        )
    url, url_ref = target.get("url"), target.get("urlSecretRef")
    if (url is None) == (url_ref is None):
        problems.add(
            path,
            "exactly one of url or urlSecretRef must be set",
            "url: 'https://hooks.example.com/pgsched'",
        )
    elif url is not None and not notifications.valid_url(url):
        problems.add(
            f"{path}.url",
            f"{_shown(url)} is not an http(s) URL without credentials",
            "url: 'https://hooks.example.com/pgsched'",
        )
    elif url_ref is not None:
        _secret_ref(url_ref, f"{path}.urlSecretRef", problems)
    signing = target.get("signingSecretRef")
    if signing is not None:
        _secret_ref(signing, f"{path}.signingSecretRef", problems)
    elif kind == "Webhook":
        problems.add(
            f"{path}.signingSecretRef",
            "is required for a Webhook target: its receiver verifies the HMAC-SHA256 signature",
            "signingSecretRef: {name: pgsched-notify, key: hmac}",
        )
    events = target.get("events")
    if events is not None and (
        not isinstance(events, list)
        or not events
        or any(event not in notifications.EVENTS for event in events)
    ):
        problems.add(
            f"{path}.events",
            f"must be a non-empty list of events, each one of {', '.join(notifications.EVENTS)}; got {_shown(events)}",
            "events: [failed, recovered]",
        )
    return name


def _secret_ref(value: Any, path: str, problems: Problems) -> None:
    if notifications.secret_ref(value) is None:
        owner = "ScheduledJob" if path.startswith("spec.notify") else "NotificationPolicy"
        problems.add(
            path,
            f"must be {{name, key}} of a Secret in the {owner}'s namespace",
            f"{path.rsplit('.', 1)[-1]}: {{name: pgsched-notify, key: hmac}}",
        )


def _shown(value: Any) -> str:
    """A value quoted in a message, cut at 80 characters: a message reaches a condition,
    an Event and kubectl's answer, whatever size the input was."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def _unknown(
    source: Mapping[str, Any],
    known: set[str],
    path: str,
    problems: Problems,
    *,
    example: str = _EXAMPLE,
) -> None:
    for key in source:
        if key not in known:
            problems.add(
                f"{path}.{key}",
                f"unknown field; known fields are {', '.join(sorted(known))}",
                example,
            )
