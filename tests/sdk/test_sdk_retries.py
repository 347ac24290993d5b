"""Exceptions become failure reasons; the kind's allow/deny lists become a retry hint.

The runner records FAILED with the exception class as the reason and ``retry_hint``
computed by isinstance (subclasses match), deny list first; the engine's settle phase then
retries as a new row with backoff, or not. Deny always wins: the kind's never_retry_on
over its own retry_on and over the definition's retryOn, and the definition's
neverRetryOn over the kind's retry_on.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from pods import TEST_MODULES, claim, run_row, sdk_job, start_job

from factories import runs_of
from pgsched.db import clock
from pgsched.engine import settle

BACKOFF = {"initialSeconds": 30, "jitter": 0}


def fail_with(conn, run_api, pods, error, name="job", **retry_policy):
    job = sdk_job(conn, name, retryPolicy={"backoff": BACKOFF, **retry_policy})
    run = claim(conn, job)
    pod = start_job(pods, run_api, run, "fail", {"error": error}, modules=TEST_MODULES)
    assert pod.wait() == 1, pod.output
    return job, run


@pytest.mark.parametrize(
    "error",
    ["TransientError", "FlakyNetwork", "TimeoutError"],
    ids=["listed", "subclass-of-listed", "builtin-listed"],
)
def test_exception_on_the_allow_list_is_retried_as_a_new_row_with_backoff(
    run_api, conn, pods, error
):
    job, run = fail_with(conn, run_api, pods, error)
    failed = run_row(conn, run)
    assert (failed["status"], failed["reason"], failed["retry_hint"]) == ("FAILED", error, "retry")
    assert failed["error"].startswith(f"{error}: it broke")
    assert "sdk_test_jobs.py" in failed["error"]  # the innermost frames

    at = clock.now(conn)
    result = settle.run_once(conn, now=at)

    assert [retried.failed.id for retried in result.retried] == [run.id]
    first, second = runs_of(conn, job)
    assert first["status"] == "FAILED"  # the failed attempt keeps its own row
    assert (second["status"], second["attempt"], second["retry_of"], second["trigger"]) == (
        "QUEUED",
        2,
        run.id,
        "retry",
    )
    assert second["scheduled_for"] == at + timedelta(seconds=30)


@pytest.mark.parametrize(
    "error", ["BudgetExhausted", "DailyBudgetExhausted"], ids=["listed", "subclass-of-listed"]
)
def test_exception_on_the_deny_list_is_never_retried_even_when_allowed_everywhere(
    run_api, conn, pods, error
):
    # BudgetExhausted is also a TransientError (the kind's retry_on), and the definition
    # allows every reason: the deny list still wins.
    job, run = fail_with(conn, run_api, pods, error, retryOn=["*"])
    assert (run_row(conn, run)["reason"], run_row(conn, run)["retry_hint"]) == (error, "never")

    result = settle.run_once(conn)

    assert result.retried == [] and [r.id for r in result.final_failures] == [run.id]
    assert len(runs_of(conn, job)) == 1


def test_exception_on_neither_list_is_retried_only_if_the_definition_allows_its_name(
    run_api, conn, pods
):
    _, plain = fail_with(conn, run_api, pods, "Unlisted")
    assert run_row(conn, plain)["retry_hint"] is None
    assert settle.run_once(conn).retried == []

    _, allowed = fail_with(conn, run_api, pods, "Unlisted", "allowed", retryOn=["Unlisted"])
    assert [retried.failed.id for retried in settle.run_once(conn).retried] == [allowed.id]


def test_definition_deny_list_wins_over_the_kinds_allow_list(run_api, conn, pods):
    job, _ = fail_with(conn, run_api, pods, "TransientError", neverRetryOn=["TransientError"])
    assert settle.run_once(conn).retried == []
    assert len(runs_of(conn, job)) == 1
