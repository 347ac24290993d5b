"""spec.parameters: values given to run-now and backfill (annotation and CLI), checked
against the declarations, recorded on the run, reaching the workload's environment."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from cli_runner import pgsched
from factories import define
from k8sfixtures import definition as fixture_definition
from k8sfixtures import job_settings
from k8sfixtures import run as fixture_run
from pgsched.db import connection
from pgsched.engine import definitions, parameters, runs, settle
from pgsched.k8s.client.finalizers import FINALIZER
from pgsched.k8s.jobside import jobs
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjobs
from pgsched.spec import SpecError
from plugins.no_requests import NoRequests

DECLARED = [
    {"name": "region", "default": "eu-west-1", "pattern": "[a-z]{2}-[a-z]+-[0-9]"},
    {"name": "day", "description": "the day to rebuild"},
]
RUN_NOW = "pgsched.dev/run-now"
RUN_NOW_PARAMETERS = "pgsched.dev/run-now-parameters"
BACKFILL = "pgsched.dev/backfill"


@pytest.fixture
def context(dsn: str) -> Iterator[scheduledjobs.Context]:
    with connection.pool(dsn, name="pgsched-test-parameters", max_size=2) as pool:
        yield scheduledjobs.Context(
            pool=pool,
            kube=NoRequests(),  # type: ignore[arg-type]
            publisher=Publisher(None),  # type: ignore[arg-type]
            clock=lambda: None,
        )


def body(
    uid: str, annotations: dict[str, str] | None = None, declared: list[Any] = DECLARED
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "report",
            "namespace": "jobs",
            "uid": uid,
            "generation": 1,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER],
            "annotations": annotations or {},
        },
        "spec": {
            "schedule": "0 3 * * *",
            "parameters": declared,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}},
        },
        "status": {"observedGeneration": 1},
    }


@pytest.fixture
def job(context: scheduledjobs.Context) -> uuid.UUID:
    uid = str(uuid.uuid4())
    scheduledjobs.sync(context, body(uid), revalidate=True)
    return uuid.UUID(uid)


def answer(context, job, **annotations: str) -> Any:
    synced = scheduledjobs.sync(context, body(str(job), annotations), revalidate=False)
    assert synced.writes is not None
    return synced.writes


def given(conn, job) -> list[dict[str, str] | None]:
    rows = conn.execute(
        "SELECT p.parameters FROM pgsched.job_runs AS r"
        " LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id"
        " WHERE r.definition_id = %s ORDER BY r.id",
        [job],
    ).fetchall()
    return [row["parameters"] for row in rows]


def test_run_now_with_parameters_records_them_on_the_run(context, conn, job):
    writes = answer(
        context,
        job,
        **{RUN_NOW: "a", RUN_NOW_PARAMETERS: json.dumps({"region": "us-east-1", "day": "3"})},
    )
    assert writes.answers == ()
    # The request, its requester (none here) and its parameters are removed together.
    [removed] = writes.remove
    assert removed.parameters_annotation == RUN_NOW_PARAMETERS
    assert given(conn, job) == [{"region": "us-east-1", "day": "3"}]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"regoin": "us-east-1"}, '"regoin" is not a declared parameter; declared: region, day'),
        ({"region": "Mars"}, '"region" "Mars" does not match the pattern "[a-z]{2}-[a-z]+-[0-9]"'),
        ({"day": "x" * 1025}, '"day" is 1025 characters long, at most 1024'),
        ({"day": "3\nrm -rf /"}, '"day" "3\\nrm -rf /" has control characters'),
        ({"day": 3}, '"day" must be a string, got 3'),
    ],
)
def test_a_bad_parameter_refuses_the_run_now_and_queues_nothing(context, conn, job, value, problem):
    writes = answer(context, job, **{RUN_NOW: "a", RUN_NOW_PARAMETERS: json.dumps(value)})
    [note] = writes.answers
    assert note.message.startswith(f"{RUN_NOW_PARAMETERS}: {problem}"), note.message
    assert "pgsched.dev/run-now of jobs/report was not carried out" in note.message
    assert note.message.endswith(
        f'(example: {RUN_NOW_PARAMETERS}={{"day": "value", "region": "eu-west-1"}})'
    )
    assert given(conn, job) == []


def test_parameters_that_are_not_a_json_object_are_refused(context, conn, job):
    for value in ("region=eu", "[1]", "{" * 20000):
        writes = answer(context, job, **{RUN_NOW: "a", RUN_NOW_PARAMETERS: value})
        [note] = writes.answers
        assert note.message.startswith(f"{RUN_NOW_PARAMETERS}: ")
    assert given(conn, job) == []


def test_a_backtracking_pattern_cannot_stall_the_operator(context, conn):
    """A pattern and a value written to take exponential time in a backtracking matcher:
    RE2 answers at once, and the value is refused as not matching."""
    uid = str(uuid.uuid4())
    evil = body(uid)
    evil["spec"]["parameters"] = [{"name": "x", "pattern": "(a+)+$"}]
    scheduledjobs.sync(context, evil, revalidate=True)
    evil["metadata"]["annotations"] = {
        RUN_NOW: "a",
        RUN_NOW_PARAMETERS: json.dumps({"x": "a" * (parameters.MAX_VALUE - 1) + "!"}),
    }
    started = time.monotonic()
    synced = scheduledjobs.sync(context, evil, revalidate=False)
    assert time.monotonic() - started < 1
    [note] = synced.writes.answers
    assert '"x" "aaaa' in note.message and 'does not match the pattern "(a+)+$"' in note.message
    assert given(conn, uuid.UUID(uid)) == []


def test_backfill_with_parameters_records_them_on_every_run(context, conn, job):
    answer(
        context,
        job,
        **{
            BACKFILL: "2026-01-02T00:00:00Z/2026-01-03T23:59:59Z",
            "pgsched.dev/backfill-parameters": json.dumps({"day": "7"}),
        },
    )
    assert given(conn, job) == [{"day": "7"}, {"day": "7"}]


def test_the_cli_database_path_checks_and_records_parameters(dsn, conn, job):
    refused = pgsched(
        "run-now", "report", "-n", "jobs", "--database", "--param", "regoin=x", dsn=dsn
    )
    assert refused.code == 2
    assert "--param regoin: is not a declared parameter; declared: region, day" in refused.err
    assert (
        "(example: --param region=eu-west-1 --param day=value); nothing was queued" in refused.err
    )
    bad = pgsched("run-now", "report", "-n", "jobs", "--database", "--param", "region", dsn=dsn)
    assert bad.code == 2 and '--param "region" is not name=value' in bad.err
    assert given(conn, job) == []

    done = pgsched(
        "run-now",
        "report",
        "-n",
        "jobs",
        "--database",
        "--param",
        "region=us-east-1",
        "-o",
        "json",
        dsn=dsn,
    )
    assert done.code == 0, done.err
    assert done.json()["run"]["parameters"] == {"region": "us-east-1"}
    described = pgsched("describe", str(done.json()["run"]["id"]), dsn=dsn)
    assert "Parameters:" in described.out and 'region="us-east-1"' in described.out


def test_a_retry_keeps_the_parameters_of_its_first_attempt(conn, job):
    first = runs.run_now(conn, job, token="t", parameters={"day": "3"}).run
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'FAILED', reason = 'NonZeroExit',"
        " finished_at = now() WHERE id = %s",
        [first.id],
    )
    conn.execute(
        "UPDATE pgsched.job_definitions SET retry_policy = %s WHERE id = %s",
        [
            json.dumps(
                {
                    "maxAttempts": 2,
                    "backoff": {"initialSeconds": 0, "maxSeconds": 0, "multiplier": 1, "jitter": 0},
                    "retryOn": ["*"],
                    "neverRetryOn": [],
                }
            ),
            job,
        ],
    )
    settle.run_once(conn)
    assert given(conn, job) == [{"day": "3"}, {"day": "3"}]


def test_the_main_container_gets_the_values_and_the_defaults_as_environment():
    spec = {
        "parameters": DECLARED,
        "jobTemplate": {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "x"},
                            {"name": "other", "image": "y"},
                        ]
                    }
                }
            }
        },
    }
    settings = job_settings("pgsched:test")
    built = jobs.build(
        fixture_definition(spec=spec), fixture_run(parameters={"day": "3"}), settings
    )
    main, other = built["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in main["env"]}
    assert env["PGSCHED_PARAM_REGION"] == "eu-west-1"  # the default
    assert env["PGSCHED_PARAM_DAY"] == "3"  # given
    assert not any(item["name"].startswith("PGSCHED_PARAM_") for item in other["env"])
    scheduled = jobs.build(fixture_definition(spec=spec), fixture_run(), settings)
    env = {item["name"] for item in scheduled["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "PGSCHED_PARAM_REGION" in env and "PGSCHED_PARAM_DAY" not in env


def test_an_sdk_job_gets_the_values_as_keyword_arguments():
    spec = {
        "parameters": DECLARED,
        "job": {"kind": "report", "args": {"day": "1", "n": 2}},
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "m"}]}}}},
    }
    built = jobs.build(
        fixture_definition(spec=spec),
        fixture_run(parameters={"day": "3"}),
        job_settings("pgsched:test"),
    )
    [main] = built["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in main["env"]}
    assert json.loads(env["PGSCHED_JOB_ARGS"]) == {"day": "3", "n": 2, "region": "eu-west-1"}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ([{"name": "PATH-X"}], "spec.parameters[0].name: 'PATH-X' is not a parameter name"),
        ([{"name": "a"}, {"name": "A"}], "spec.parameters[1].name: 'A' is declared twice"),
        ([{"name": "a", "pattern": "("}], 'spec.parameters[0].pattern: "(" is not an RE2'),
        (
            [{"name": "a", "pattern": "(a)\\1"}],
            'spec.parameters[0].pattern: "(a)\\\\1" is not an RE2 pattern: invalid escape',
        ),
        (
            [{"name": "a", "pattern": "[0-9]+", "default": "x"}],
            'spec.parameters[0].default: "x" does not match the pattern "[0-9]+"',
        ),
        (
            [{"name": f"p{i}"} for i in range(21)],
            "spec.parameters: declares 21 parameters, at most 20",
        ),
        ([{"name": "a", "default": 3}], "spec.parameters[0].default: must be a string"),
    ],
)
def test_bad_declarations_are_refused_at_apply_naming_the_field(conn, declared, message):
    with pytest.raises(SpecError) as refused:
        define(
            conn, schedule="0 3 * * *", parameters=declared, now=datetime(2026, 1, 1, tzinfo=UTC)
        )
    assert message in str(refused.value)
    assert "example: parameters: [{name: region" in str(refused.value)
    assert definitions.find(conn, "default", "job") is None


STRICT = [
    {"name": "day", "pattern": "[0-9]{1,2}"},
    {"name": "stage", "pattern": "(staging|prod)-[a-z]{3}"},
]


def test_the_example_of_a_refusal_is_a_value_the_patterns_accept_and_it_is_carried_out(
    context, conn
):
    uid = str(uuid.uuid4())
    scheduledjobs.sync(context, body(uid, declared=STRICT), revalidate=True)
    bad = {RUN_NOW: "a", RUN_NOW_PARAMETERS: json.dumps({"day": "monday"})}
    synced = scheduledjobs.sync(context, body(uid, bad, STRICT), revalidate=False)
    assert synced.writes is not None
    [note] = synced.writes.answers
    example = note.message.rsplit(f"(example: {RUN_NOW_PARAMETERS}=", 1)[1].removesuffix(")")
    values = json.loads(example)
    assert values == {"day": "1", "stage": "staging-aaa"}, values
    assert all(parameters.matches(item["pattern"], values[item["name"]]) for item in STRICT)
    # Doing what the refusal says is accepted.
    told = {RUN_NOW: "b", RUN_NOW_PARAMETERS: example}
    synced = scheduledjobs.sync(context, body(uid, told, STRICT), revalidate=False)
    assert synced.writes is not None and synced.writes.answers == ()
    assert given(conn, uuid.UUID(uid)) == [values]


def test_a_pattern_no_example_can_be_spelled_for_says_what_the_value_must_match():
    [item] = parameters.declared({"parameters": [{"name": "code", "pattern": "[[:alpha:]]{3}"}]})
    # RE2's POSIX class: CPython's parser reads it as a set of ":alph" and "]", whose
    # spelling RE2 refuses; so no example rather than a wrong one.
    assert parameters.example_value(item) == "<a value matching [[:alpha:]]{3}>"
    assert parameters.matches(item.pattern, "abc"), "the pattern itself is fine"
