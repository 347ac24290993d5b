"""A run that cannot start fails fast (exit 2) with a message that says what to fix.

With a valid lease the failure is also recorded (FAILED, ``retry_hint = never``: another
attempt would fail the same way); without the contract nothing can be recorded.
"""

from __future__ import annotations

from pods import EXAMPLE_MODULES, claim, contract, run_row, sdk_job, start_job

from pgsched.engine import settle


def test_unregistered_kind_fails_fast_listing_the_registered_kinds(run_api, conn, pods):
    run = claim(conn, sdk_job(conn, retryPolicy={"retryOn": ["*"]}))

    pod = start_job(pods, run_api, run, "ledger-imprt", {"source": "x", "total": 1})

    assert pod.wait() == 2, pod.output
    message = (
        "job kind 'ledger-imprt' is not registered; registered kinds: ledger-import,"
        f" ledger-report (imported modules: {EXAMPLE_MODULES.replace(',', ', ')})"
    )
    assert message in pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["retry_hint"], row["exit_code"]) == (
        "FAILED",
        "UnknownJobKind",
        "never",
        2,
    )
    assert message in row["error"]
    assert settle.run_once(conn).retried == []  # even though retryOn allows everything


def test_bad_arguments_fail_fast_naming_every_problem_and_the_signature(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))
    args = {"total": "1000", "batch_size": 2.5, "souce": "nov"}

    pod = start_job(pods, run_api, run, "ledger-import", args)

    assert pod.wait() == 2, pod.output
    row = run_row(conn, run)
    assert (row["status"], row["reason"], row["retry_hint"]) == (
        "FAILED",
        "InvalidJobArguments",
        "never",
    )
    assert row["error"].splitlines() == [
        "invalid arguments for job kind 'ledger-import' (spec.job.args / PGSCHED_JOB_ARGS):",
        "  - 'total' must be an integer, got string '1000'",
        "  - 'batch_size' must be an integer, got number 2.5",
        "  - unknown argument 'souce' (known: 'source', 'total', 'batch_size', 'accounts',"
        " 'pause_seconds')",
        "  - missing required argument 'source'",
        "  expected: ledger_import(ctx, *, source: str, total: int, batch_size: int = 100,"
        " accounts: int = 10, pause_seconds: float = 0.0)",
    ]
    assert "batch 0" not in pod.output  # nothing was imported


def test_unimportable_job_module_fails_fast_naming_the_module(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))

    pod = start_job(pods, run_api, run, "ledger-import", modules="pgsched_examples.nope")

    assert pod.wait() == 2, pod.output
    row = run_row(conn, run)
    assert (row["reason"], row["retry_hint"]) == ("JobModuleImportFailed", "never")
    assert row["error"].startswith(
        "cannot import job module 'pgsched_examples.nope' (spec.job.modules /"
        " PGSCHED_JOB_MODULES): ModuleNotFoundError: No module named 'pgsched_examples.nope'"
    )


def test_broken_contract_exits_2_naming_every_missing_or_bad_variable(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))
    env = contract(
        run_api, run, PGSCHED_JOB_ARGS="[1, 2]", PGSCHED_HEARTBEAT_INTERVAL_SECONDS="soon"
    )
    del env["PGSCHED_LEASE_TOKEN"], env["PGSCHED_ATTEMPT"]

    pod = pods("run", env)

    assert pod.wait() == 2, pod.output
    assert (
        pod.lines[0] == "pgsched run: cannot start the run, the pod's configuration is incomplete:"
    )
    assert pod.lines[1:] == [
        "PGSCHED_LEASE_TOKEN: is not set: the run's lease token from its claim; fences every"
        " write; set it or pass --lease-token (example:"
        " PGSCHED_LEASE_TOKEN=3f2c6a9e-8d1b-4c55-9a57-0e7d2b1c4f10)",
        "PGSCHED_HEARTBEAT_INTERVAL_SECONDS (--heartbeat-interval): 'soon' is not a number"
        " (example: PGSCHED_HEARTBEAT_INTERVAL_SECONDS=10)",
        "PGSCHED_ATTEMPT: is not set: the run's attempt number (1, 2, ...); set it or pass"
        " --attempt (example: PGSCHED_ATTEMPT=1)",
        "PGSCHED_JOB_KIND: is not set: the job kind to run; set it or pass --kind (example:"
        " PGSCHED_JOB_KIND=nightly-report)",
        "PGSCHED_JOB_ARGS (--args): '[1, 2]' must be a JSON object (example:"
        " PGSCHED_JOB_ARGS='{\"days\": 7}')",
    ]
    assert run_row(conn, run)["status"] == "RUNNING"  # nothing could be recorded


def test_flags_override_the_environment(run_api, conn, pods):
    run = claim(conn, sdk_job(conn))
    env = contract(run_api, run, PGSCHED_JOB_KIND="nope", PGSCHED_JOB_MODULES="nope")

    pod = pods(
        "run",
        env,
        "--kind",
        "ledger-import",
        "--module",
        "pgsched_examples.ledger_import",
        "--args",
        '{"source": "flags", "total": 3}',
    )

    assert pod.wait() == 0, pod.output
    assert run_row(conn, run)["status"] == "COMPLETED"
