"""The in-pod environment contract: read once, validated, every problem named at once."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pgsched.runner import settings
from pgsched.runner.settings import JobSelection, RunnerSettings
from pgsched.validation import SettingsError

TOKEN = "3f2c6a9e-8d1b-4c55-9a57-0e7d2b1c4f10"
LEASE_ENV = {"PGSCHED_RUN_ID": "42", "PGSCHED_LEASE_TOKEN": TOKEN, "PGSCHED_DSN": "host=db"}
JOB_ENV = {
    **LEASE_ENV,
    "PGSCHED_ATTEMPT": "2",
    "PGSCHED_JOB_KIND": "ledger-import",
    "PGSCHED_JOB_ARGS": '{"total": 10}',
    "PGSCHED_JOB_MODULES": " myapp.jobs, myapp.more ,",
}


def test_the_sidecar_needs_only_the_lease_and_gets_defaults():
    read = settings.from_environment(LEASE_ENV, job=False)
    assert read == RunnerSettings(run_id=42, lease_token=uuid.UUID(TOKEN), dsn="host=db")
    assert (read.heartbeat_interval_seconds, read.cancel_file) == (10.0, Path("/pgsched/cancel"))
    assert read.job is None


def test_the_runner_reads_its_job_selection():
    read = settings.from_environment(JOB_ENV, job=True)
    assert read.attempt == 2
    assert read.job == JobSelection("ledger-import", {"total": 10}, ("myapp.jobs", "myapp.more"))


def test_flags_win_over_the_environment_and_unset_flags_do_not():
    read = settings.from_environment(
        JOB_ENV,
        overrides={"PGSCHED_JOB_KIND": "ledger-report", "PGSCHED_ATTEMPT": None},
        job=True,
    )
    assert (read.job.kind, read.attempt) == ("ledger-report", 2)


def test_attempt_zero_is_refused_not_defaulted():
    with pytest.raises(SettingsError, match=r"PGSCHED_ATTEMPT \(--attempt\): 0 must be 1 or more"):
        settings.from_environment({**JOB_ENV, "PGSCHED_ATTEMPT": "0"}, job=True)


def test_range_problems_are_found_by_the_dataclass_itself():
    with pytest.raises(SettingsError) as raised:
        RunnerSettings(
            run_id=0,
            lease_token=uuid.UUID(TOKEN),
            dsn=" ",
            heartbeat_interval_seconds=0,
            job=JobSelection("Bad Kind", {}, ("my-app.jobs",)),
        )
    assert [str(problem) for problem in raised.value.errors] == [
        "PGSCHED_RUN_ID (--run-id): 0 must be a positive integer (example: PGSCHED_RUN_ID=42)",
        "PGSCHED_DSN (--dsn): (hidden) must not be empty (example: PGSCHED_DSN='host=db"
        " user=pgsched_job dbname=pgsched')",
        "PGSCHED_HEARTBEAT_INTERVAL_SECONDS (--heartbeat-interval): 0 is out of range 0.05..3600"
        " (example: PGSCHED_HEARTBEAT_INTERVAL_SECONDS=10)",
        "PGSCHED_JOB_KIND (--kind): 'Bad Kind' is not a job kind name (lowercase letters,"
        " digits, '.', '_' or '-') (example: PGSCHED_JOB_KIND=nightly-report)",
        "PGSCHED_JOB_MODULES (--module): 'my-app.jobs' is not a Python module name (example:"
        " PGSCHED_JOB_MODULES=myapp.jobs,myapp.reports)",
    ]


def test_the_dsn_never_appears_in_messages_or_repr():
    secret = "host=db password=hunter2"
    read = settings.from_environment({**LEASE_ENV, "PGSCHED_DSN": secret}, job=False)
    assert "hunter2" not in repr(read)
    with pytest.raises(SettingsError) as raised:
        settings.from_environment(
            {**LEASE_ENV, "PGSCHED_DSN": secret, "PGSCHED_RUN_ID": "x"}, job=False
        )
    assert "hunter2" not in str(raised.value)
