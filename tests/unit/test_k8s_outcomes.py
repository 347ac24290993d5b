"""A finished Job and its pods, read into the run's outcome and failure reason."""

from __future__ import annotations

from pgsched.k8s.jobside import outcomes


def job(*conditions):
    return {
        "status": {
            "conditions": [
                {"type": kind, "status": "True", "reason": reason} for kind, reason in conditions
            ]
        }
    }


def pod(exit_code, *, reason="Error", name="main", pod_reason=None, created="2026-01-01T00:00:00Z"):
    status = {
        "containerStatuses": [
            {"name": name, "state": {"terminated": {"exitCode": exit_code, "reason": reason}}}
        ]
    }
    if pod_reason:
        status["reason"] = pod_reason
    return {"metadata": {"creationTimestamp": created}, "status": status}


def test_running_job_has_no_outcome_yet():
    assert outcomes.of_job(job(), [], deleted=False, cancel_requested=False) is None


def test_complete_job_completes_the_run():
    outcome = outcomes.of_job(
        job(("Complete", None)), [pod(0, reason="Completed")], deleted=False, cancel_requested=False
    )
    assert (outcome.status, outcome.exit_code) == ("COMPLETED", 0)


def test_non_zero_exit_reports_the_container_and_code():
    outcome = outcomes.of_job(
        job(("Failed", "BackoffLimitExceeded")), [pod(3)], deleted=False, cancel_requested=False
    )
    assert (outcome.status, outcome.reason, outcome.exit_code) == ("FAILED", "NonZeroExit", 3)
    assert outcome.error == "container main exited with code 3"


def test_oom_kill_is_its_own_reason():
    outcome = outcomes.of_job(
        job(("Failed", None)), [pod(137, reason="OOMKilled")], deleted=False, cancel_requested=False
    )
    assert outcome.reason == "OOMKilled"


def test_deadline_exceeded_comes_from_the_job_condition():
    outcome = outcomes.of_job(
        job(("Failed", "DeadlineExceeded")), [], deleted=False, cancel_requested=False
    )
    assert outcome.reason == "DeadlineExceeded"


def test_evicted_pod_is_evicted():
    outcome = outcomes.of_job(
        job(("Failed", None)),
        [pod(137, pod_reason="Evicted")],
        deleted=False,
        cancel_requested=False,
    )
    assert outcome.reason == "Evicted"


def test_deleted_job_of_a_running_run_is_job_deleted():
    outcome = outcomes.of_job(job(), [], deleted=True, cancel_requested=False)
    assert (outcome.status, outcome.reason) == ("FAILED", "JobDeleted")


def test_cancelled_run_ends_cancelled_however_its_pod_exited():
    for finished in (job(("Complete", None)), job(("Failed", None))):
        outcome = outcomes.of_job(finished, [pod(143)], deleted=False, cancel_requested=True)
        assert (outcome.status, outcome.reason) == ("CANCELLED", "Cancelled")
    assert outcomes.of_job(job(), [], deleted=True, cancel_requested=True).status == "CANCELLED"


def test_the_newest_pod_decides():
    pods = [pod(1, created="2026-01-01T00:00:00Z"), pod(2, created="2026-01-01T00:05:00Z")]
    assert (
        outcomes.of_job(
            job(("Failed", None)), pods, deleted=False, cancel_requested=False
        ).exit_code
        == 2
    )


def test_a_workload_that_exits_0_after_a_cancel_request_is_cancelled_with_its_code_said():
    """docs/scheduling.md, Cancellation: exit 0 after reading the cancel file is a cooperative stop."""
    outcome = outcomes.of_job(
        job(("Complete", None)), [pod(0, reason="Completed")], deleted=False, cancel_requested=True
    )
    assert (outcome.status, outcome.reason) == ("CANCELLED", "Cancelled")
    assert outcome.error == "stopped after cancellation was requested (exit code 0)"
