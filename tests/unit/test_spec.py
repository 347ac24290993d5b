"""Spec validation: every bad field is named, with what is wrong and a valid example."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsched import spec
from pgsched.engine import definitions
from pgsched.engine.retry import RetryPolicy
from pgsched.spec.fields import ENGINE_FIELDS, EXTRA_FIELDS

EXAMPLES = Path(__file__).parents[2] / "examples"

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def parse(**fields):
    return spec.parse(fields, hash_seed="ns/job", anchor=NOW, now=NOW)


def errors_of(**fields):
    with pytest.raises(spec.SpecError) as caught:
        parse(**fields)
    return {error.path.removeprefix("spec."): error for error in caught.value.errors}


def test_minimal_spec_gets_documented_defaults():
    parsed = parse(schedule="0 8 * * *")
    assert parsed.schedule_kind == "cron"
    assert parsed.time_zone == "UTC"
    assert (parsed.dst_gap, parsed.dst_repeat) == ("shift", "first")
    assert parsed.max_concurrent_runs == 1
    assert parsed.concurrency_policy == "Queue"
    assert parsed.catch_up == "latest"
    assert parsed.retry_policy == RetryPolicy()
    assert (parsed.heartbeat_interval_seconds, parsed.heartbeat_timeout_seconds) == (10, 60)
    assert parsed.orphan_timeout_seconds == 300


def test_full_spec_round_trips():
    parsed = parse(
        rrule="FREQ=DAILY;BYHOUR=8",
        timeZone="Europe/Sofia",
        dstPolicy={"gap": "skip", "repeat": "both"},
        maxConcurrentRuns=3,
        concurrencyPolicy="Replace",
        startingDeadlineSeconds=120,
        catchUp="all",
        catchUpLimit=5,
        retryPolicy={
            "maxAttempts": 5,
            "backoff": {"initialSeconds": 1, "maxSeconds": 30, "multiplier": 3, "jitter": 0},
            "retryOn": ["NonZeroExit", "*"],
            "neverRetryOn": ["OOMKilled", "myapp.BudgetExhausted"],
        },
        heartbeat={"intervalSeconds": 5, "timeoutSeconds": 15, "orphanTimeoutSeconds": 600},
        failureSuspendThreshold=4,
        jobTemplate={"spec": {}},
    )
    assert parsed.schedule_kind == "rrule"
    assert parsed.retry_policy.never_retry_on == ("OOMKilled", "myapp.BudgetExhausted")
    assert parsed.retry_policy.backoff.multiplier == 3
    assert parsed.heartbeat_timeout_seconds == 15
    assert parsed.extra == {"jobTemplate": {"spec": {}}}


@pytest.mark.parametrize(
    ("fields", "path", "complaint", "example"),
    [
        ({"schedule": "61 * * * *"}, "schedule", "minute value 61", "*/15 * * * *"),
        (
            {"rrule": "FREQ=DAILY;BYHOUR=25"},
            "rrule",
            "BYHOUR=25 is out of range 0..23",
            "FREQ=DAILY",
        ),
        ({"runAt": "next tuesday"}, "runAt", "not an ISO 8601", "2026-12-24T18:00:00"),
        (
            {"schedule": "* * * * *", "timeZone": "Europe/Sofiya"},
            "timeZone",
            "unknown time zone 'Europe/Sofiya'",
            "America/New_York",
        ),
        (
            {"schedule": "* * * * *", "maxConcurrentRuns": -1},
            "maxConcurrentRuns",
            "-1 is out of range 1..",
            "maxConcurrentRuns: 2",
        ),
        (
            {"schedule": "* * * * *", "maxConcurrentRuns": "2"},
            "maxConcurrentRuns",
            "must be an integer, got string '2'",
            "maxConcurrentRuns: 2",
        ),
        (
            {"schedule": "* * * * *", "concurrencyPolicy": "Forbid"},
            "concurrencyPolicy",
            "'Forbid' is not one of Queue, Skip, Replace",
            "concurrencyPolicy: Replace",
        ),
        (
            {"schedule": "* * * * *", "retryPolicy": {"maxAttempts": 0}},
            "retryPolicy.maxAttempts",
            "0 is out of range 1..",
            "maxAttempts: 3",
        ),
        (
            {"schedule": "* * * * *", "retryPolicy": {"retryOn": "NonZeroExit"}},
            "retryPolicy.retryOn",
            "must be a list",
            "retryOn: [NonZeroExit, HeartbeatLost]",
        ),
        (
            {"schedule": "* * * * *", "retryPolicy": {"neverRetryOn": ["Non Zero"]}},
            "retryPolicy.neverRetryOn[0]",
            "'Non Zero' is not a failure reason",
            "neverRetryOn: [NonZeroExit, HeartbeatLost]",
        ),
        (
            {
                "schedule": "* * * * *",
                "retryPolicy": {"backoff": {"initialSeconds": 60, "maxSeconds": 10}},
            },
            "retryPolicy.backoff.maxSeconds",
            "less than initialSeconds",
            "maxSeconds: 600",
        ),
        (
            {"schedule": "* * * * *", "retryPolicy": {"maxAttemps": 3}},
            "retryPolicy.maxAttemps",
            "unknown field",
            None,
        ),
        (
            {"schedule": "* * * * *", "heartbeat": {"intervalSeconds": 30, "timeoutSeconds": 40}},
            "heartbeat.timeoutSeconds",
            "at least twice intervalSeconds",
            "timeoutSeconds: 90",
        ),
        (
            {
                "schedule": "* * * * *",
                "heartbeat": {"timeoutSeconds": 600, "orphanTimeoutSeconds": 60},
            },
            "heartbeat.orphanTimeoutSeconds",
            "at least timeoutSeconds",
            "orphanTimeoutSeconds: 600",
        ),
        (
            {"schedule": "* * * * *", "suspend": "yes"},
            "suspend",
            "must be true or false",
            "suspend: true",
        ),
        (
            {"schedule": "* * * * *", "job": {"kind": "Bad Kind"}},
            "job.kind",
            "is not a job kind name",
            "kind: nightly-report",
        ),
        (
            {"schedule": "* * * * *", "pool": "Warehouse_1"},
            "pool",
            "is not a ConcurrencyPool name",
            "pool: warehouse",
        ),
        ({"schedule": "* * * * *", "pool": 3}, "pool", "is not a ConcurrencyPool name", None),
        ({"schedule": "* * * * *", "scheduel": "x"}, "scheduel", "unknown field", None),
        (
            {"schedule": "* * * * *", "startTimeoutSeconds": 0},
            "startTimeoutSeconds",
            "0 is out of range 1..",
            "startTimeoutSeconds: 300",
        ),
        (
            {"schedule": "* * * * *", "admissionTimeoutSeconds": "1h"},
            "admissionTimeoutSeconds",
            "must be an integer, got string '1h'",
            "admissionTimeoutSeconds: 3600",
        ),
    ],
)
def test_bad_field_is_named_with_the_value_and_an_example(fields, path, complaint, example):
    found = errors_of(**fields)
    assert path in found, found
    assert complaint in found[path].message
    if example:
        assert example in (found[path].example or "")
    assert str(found[path]).startswith(f"spec.{path}: ")


def test_a_pool_name_is_accepted_and_kept_with_the_spec():
    assert parse(schedule="0 2 * * *", pool="warehouse").extra["pool"] == "warehouse"


def test_exactly_one_schedule_kind():
    assert "none is set" in errors_of()["schedule"].message
    both = errors_of(schedule="* * * * *", rrule="FREQ=DAILY")["schedule"]
    assert "schedule and rrule are all set" in both.message


def test_every_problem_is_reported_at_once():
    found = errors_of(
        schedule="* * * * *", timeZone="Nowhere/City", maxConcurrentRuns=0, catchUp="some"
    )
    assert {"timeZone", "maxConcurrentRuns", "catchUp"} <= found.keys()


def test_a_rule_whose_occurrences_are_all_past_is_accepted_and_stays_valid():
    # Valid the day it was applied, so valid on every later day: it just never runs again.
    parsed = parse(rrule="DTSTART:20200101T000000\nRRULE:FREQ=DAILY;COUNT=3")
    built = definitions.build_schedule(parsed, hash_seed="ns/job", anchor=NOW)
    assert built.next_after(NOW) is None


def test_a_rule_that_never_produces_an_occurrence_is_rejected():
    found = errors_of(rrule="FREQ=DAILY;UNTIL=20200101T000000")
    assert "never produces an occurrence" in found["rrule"].message


def test_a_one_shot_in_the_past_is_accepted():
    assert parse(runAt="2020-01-01T00:00:00").schedule_kind == "once"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from([*sorted(ENGINE_FIELDS | EXTRA_FIELDS), "bogus"])
_values = st.one_of(
    _json,
    st.sampled_from(
        [
            "* * * * *",
            "FREQ=DAILY;BYHOUR=8",
            "2026-12-24T18:00:00",
            "Europe/Sofia",
            "H H * * *",
            "0 0 31 2 *",
            "@hourly",
            "Queue",
            "all",
            "shift",
        ]
    ),
    st.dictionaries(
        st.sampled_from(
            [
                "gap",
                "repeat",
                "maxAttempts",
                "backoff",
                "retryOn",
                "neverRetryOn",
                "intervalSeconds",
                "timeoutSeconds",
                "orphanTimeoutSeconds",
                "kind",
                "args",
            ]
        ),
        _json,
        max_size=4,
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=8))
def test_fuzzed_specs_raise_nothing_but_spec_errors(fields):
    try:
        spec.parse(fields, hash_seed="ns/job", anchor=NOW, now=NOW)
    except spec.SpecError as error:
        assert error.errors and all(str(item).startswith("spec.") for item in error.errors)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_fuzzed_schedule_text_raises_nothing_but_spec_errors(text):
    for field in ("schedule", "rrule", "runAt"):
        with contextlib.suppress(spec.SpecError):
            spec.parse({field: text}, hash_seed="ns/job", anchor=NOW, now=NOW)


def test_the_warehouse_pool_example_is_valid():
    """examples/warehouse-pool.yaml: a pool of 2 (what the CRD admits) and four jobs in it."""
    documents = list(yaml.safe_load_all((EXAMPLES / "warehouse-pool.yaml").read_text()))
    [pool] = [doc for doc in documents if doc["kind"] == "ConcurrencyPool"]
    jobs = [doc for doc in documents if doc["kind"] == "ScheduledJob"]
    assert pool["spec"] == {"limit": 2} and len(jobs) == 4
    for job in jobs:
        parsed = spec.parse(job["spec"], hash_seed=job["metadata"]["name"], anchor=NOW, now=NOW)
        assert parsed.extra["pool"] == pool["metadata"]["name"]
