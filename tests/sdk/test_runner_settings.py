"""The in-pod environment contract: read once, validated, every problem named at once."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pgsched.runner import settings
from pgsched.runner.settings import JobSelection, RunnerSettings
from pgsched.validation import SettingsError

TOKEN = "3f2c6a9e-8d1b-4c55-9a57-0e7d2b1c4f10"
URL = "https://10.0.0.5:8443"


@pytest.fixture(scope="module")
def ca(run_api_tls):
    return (run_api_tls / "ca.crt").read_text()


@pytest.fixture
def lease_env(ca):
    return {
        "PGSCHED_RUN_ID": "42",
        "PGSCHED_LEASE_TOKEN": TOKEN,
        "PGSCHED_RUN_API_URL": URL,
        "PGSCHED_RUN_API_CA": ca,
    }


@pytest.fixture
def job_env(lease_env):
    return {
        **lease_env,
        "PGSCHED_ATTEMPT": "2",
        "PGSCHED_JOB_KIND": "ledger-import",
        "PGSCHED_JOB_ARGS": '{"total": 10}',
        "PGSCHED_JOB_MODULES": " myapp.jobs, myapp.more ,",
    }


def test_the_sidecar_needs_only_the_lease_and_the_run_api_and_gets_defaults(lease_env, ca):
    read = settings.from_environment(lease_env, job=False)
    assert read == RunnerSettings(
        run_id=42, lease_token=uuid.UUID(TOKEN), run_api_url=URL, run_api_ca=ca.strip()
    )
    assert (read.heartbeat_interval_seconds, read.cancel_file) == (10.0, Path("/pgsched/cancel"))
    assert read.job is None


def test_the_runner_reads_its_job_selection(job_env):
    read = settings.from_environment(job_env, job=True)
    assert read.attempt == 2
    assert read.job == JobSelection("ledger-import", {"total": 10}, ("myapp.jobs", "myapp.more"))


def test_flags_win_over_the_environment_and_unset_flags_do_not(job_env):
    read = settings.from_environment(
        job_env,
        overrides={"PGSCHED_JOB_KIND": "ledger-report", "PGSCHED_ATTEMPT": None},
        job=True,
    )
    assert (read.job.kind, read.attempt) == ("ledger-report", 2)


def test_attempt_zero_is_refused_not_defaulted(job_env):
    with pytest.raises(SettingsError, match=r"PGSCHED_ATTEMPT \(--attempt\): 0 must be 1 or more"):
        settings.from_environment({**job_env, "PGSCHED_ATTEMPT": "0"}, job=True)


def test_range_problems_are_found_by_the_dataclass_itself():
    with pytest.raises(SettingsError) as raised:
        RunnerSettings(
            run_id=0,
            lease_token=uuid.UUID(TOKEN),
            run_api_url="http://10.0.0.5",
            run_api_ca="-----BEGIN CERTIFICATE-----\n" + "A" * 64 + "\n-----END CERTIFICATE-----\n",
            heartbeat_interval_seconds=0,
            job=JobSelection("Bad Kind", {}, ("my-app.jobs",)),
        )
    problems = [str(problem) for problem in raised.value.errors]
    # What OpenSSL says of the CA varies with its version; the rest is ours.
    assert problems.pop(2).startswith(
        "PGSCHED_RUN_API_CA (--run-api-ca): '-----BEGIN CERTIFICATE-----\\nAAAAAAAAAAAAAAAAAAAAAAAAAAA..."
        " cannot be loaded as a CA certificate ("
    )
    assert problems == [
        "PGSCHED_RUN_ID (--run-id): 0 must be a positive integer (example: PGSCHED_RUN_ID=42)",
        "PGSCHED_RUN_API_URL (--run-api-url): 'http://10.0.0.5' is not an https:// URL (the run"
        " API is served over TLS only) (example:"
        " PGSCHED_RUN_API_URL=https://pgsched-run-api.pgsched.svc)",
        "PGSCHED_HEARTBEAT_INTERVAL_SECONDS (--heartbeat-interval): 0 is out of range 0.05..3600"
        " (example: PGSCHED_HEARTBEAT_INTERVAL_SECONDS=10)",
        "PGSCHED_JOB_KIND (--kind): 'Bad Kind' is not a job kind name (lowercase letters,"
        " digits, '.', '_' or '-') (example: PGSCHED_JOB_KIND=nightly-report)",
        "PGSCHED_JOB_MODULES (--module): 'my-app.jobs' is not a Python module name (example:"
        " PGSCHED_JOB_MODULES=myapp.jobs,myapp.reports)",
    ]


def test_the_run_api_must_be_named_and_a_ca_given(lease_env):
    with pytest.raises(SettingsError) as raised:
        settings.from_environment(
            {**lease_env, "PGSCHED_RUN_API_URL": "", "PGSCHED_RUN_API_CA": "  "}, job=False
        )
    assert [str(problem) for problem in raised.value.errors] == [
        "PGSCHED_RUN_API_URL: is not set: address of the run API the pod talks to"
        " (docs/run-api.md); set it or pass --run-api-url (example:"
        " PGSCHED_RUN_API_URL=https://pgsched-run-api.pgsched.svc)",
        "PGSCHED_RUN_API_CA: is not set: PEM text of the CA certificate of the run API's server,"
        " the only one trusted; set it or pass --run-api-ca (example:"
        ' PGSCHED_RUN_API_CA="$(cat ca.crt)")',
    ]


def test_a_ca_that_is_not_pem_is_refused_and_the_pem_stays_out_of_repr(lease_env):
    with pytest.raises(SettingsError, match="is not PEM text of a certificate"):
        settings.from_environment({**lease_env, "PGSCHED_RUN_API_CA": "ca.crt"}, job=False)
    assert "BEGIN CERTIFICATE" not in repr(settings.from_environment(lease_env, job=False))
