"""Hostile schedules and the exact refusal each must get, whenever it is applied.

Shared by the cluster test that applies them next to a normal ScheduledJob
(tests/cluster/test_hostile_input.py) and the unit test that validates them with the
clock pinned across a year (tests/unit/test_rrule_validation.py).
"""

from __future__ import annotations

INTERVAL_0 = "DTSTART:20270101T000000\nRRULE:FREQ=DAILY;INTERVAL=0"
HOSTILE = {
    # The CRD's pattern refuses INTERVAL=0 at apply; a space gets the same rule past it.
    "rrule-interval-0": (
        {"rrule": INTERVAL_0.replace("INTERVAL=0", "INTERVAL= 0")},
        "spec.rrule: INTERVAL=0 must be an integer in 1..1000000 (example: FREQ=WEEKLY;INTERVAL=2)",
    ),
    "rrule-slow-scan": (
        {
            # DTSTART pinned, so the verdict is the same on every day. Without it the rule
            # counts from the day it is applied, and a 7-second interval's first Dec 31
            # 03:05:09 is in the budget's reach on some days only: the refusal then says
            # so (HOSTILE_UNANCHORED, tests/unit/test_rrule_validation.py).
            "rrule": "DTSTART:20260101T000000\n"
            "RRULE:FREQ=SECONDLY;INTERVAL=7;BYMONTH=12;BYMONTHDAY=31;BYHOUR=3;BYMINUTE=5;BYSECOND=9"
        },
        "never produces an occurrence",
    ),
    "cron-never": (
        {"schedule": "0 0 30 2 *"},
        "spec.schedule: '0 0 30 2 *' never fires",
    ),
    "run-at-year-9999": (
        {"runAt": "9999-12-31T23:59:59", "timeZone": "America/New_York"},
        "spec.runAt: '9999-12-31T23:59:59': year 9999 is outside 1901..8999",
    ),
}

# The same rule without DTSTART: refused on every day, with a message that names what the
# verdict depended on (the day it was applied, or the moment the search started).
HOSTILE_UNANCHORED = (
    "FREQ=SECONDLY;INTERVAL=7;BYMONTH=12;BYMONTHDAY=31;BYHOUR=3;BYMINUTE=5;BYSECOND=9"
)

# Hostile NotificationPolicies (name, spec) and the line of the refusal each must get: at
# apply (the CRD's schema or the admission webhook) and from the controller, which stores
# nothing of them (tests/unit/test_notification_policy.py). A policy reaches only its own
# namespace's jobs and Secrets: there is no field to name another namespace.
_HOOK = {
    "name": "oncall",
    "type": "Webhook",
    "url": "https://alerts.example.com/pgsched",
    "signingSecretRef": {"name": "pgsched-notify", "key": "hmac"},
}
HOSTILE_POLICIES = {
    "another-name": (
        ("team-a", {"targets": [_HOOK]}),
        "metadata.name: 'team-a': a namespace has one NotificationPolicy, named default",
    ),
    "secret-of-another-namespace": (
        (
            "default",
            {
                "targets": [
                    {
                        **_HOOK,
                        "signingSecretRef": {
                            "name": "pgsched-notify",
                            "key": "hmac",
                            "namespace": "kube-system",
                        },
                    }
                ]
            },
        ),
        "spec.targets[0].signingSecretRef: must be {name, key} of a Secret in the"
        " NotificationPolicy's namespace",
    ),
    "namespace-field": (
        ("default", {"targets": [_HOOK], "namespace": "team-b"}),
        "spec.namespace: unknown field; known fields are failedOn, targets",
    ),
    "credentials-in-url": (
        ("default", {"targets": [{**_HOOK, "url": "https://user:pw@alerts.example.com/"}]}),
        "spec.targets[0].url: 'https://user:pw@alerts.example.com/' is not an http(s) URL"
        " without credentials",
    ),
    "url-of-a-megabyte": (
        ("default", {"targets": [{**_HOOK, "url": "https://a.example/" + "x" * 1_000_000}]}),
        "spec.targets[0].url: ",
    ),
    "a-thousand-targets": (
        ("default", {"targets": [{**_HOOK, "name": f"t{i}"} for i in range(1000)]}),
        "spec.targets: names 1000 targets, at most 10",
    ),
    "no-targets": (
        ("default", {"failedOn": "EachAttempt"}),
        "spec.targets: must be a non-empty list of targets",
    ),
    "targets-not-a-list": (
        ("default", {"targets": {"oncall": _HOOK}}),
        "spec.targets: must be a non-empty list of targets",
    ),
    "unsigned-webhook": (
        ("default", {"targets": [{k: v for k, v in _HOOK.items() if k != "signingSecretRef"}]}),
        "spec.targets[0].signingSecretRef: is required for a Webhook target",
    ),
    "not-an-object": (("default", ["oncall"]), "spec: must be an object"),
}
