"""Which active Jobs the publisher stops because their run has already ended."""

from __future__ import annotations

from datetime import timedelta

from k8sfixtures import T0, definition
from pgsched.engine.runs import Ending
from pgsched.k8s.jobside.cleanup import must_stop


def ending(status, reason=None, *, finished=0, cancel_requested=None, checked=1):
    at = lambda seconds: None if seconds is None else T0 + timedelta(seconds=seconds)  # noqa: E731
    return Ending(status, reason, at(finished), at(cancel_requested), at(checked))


def test_running_or_unknown_runs_keep_their_jobs():
    assert not must_stop(None, definition())
    assert not must_stop(ending("RUNNING", finished=None), definition())


def test_runs_the_engine_ended_lose_their_pods_at_once():
    for reason in ("HeartbeatLost", "Orphaned", "DeadlineExceeded"):
        assert must_stop(ending("FAILED", reason), definition())


def test_a_cancel_forced_after_the_grace_stops_the_pod_but_a_cooperative_one_does_not():
    grace = definition(cancel_grace_seconds=30)
    assert must_stop(
        ending("CANCELLED", "Cancelled", finished=31, cancel_requested=0, checked=32), grace
    )
    assert not must_stop(
        ending("CANCELLED", "Cancelled", finished=5, cancel_requested=0, checked=6), grace
    )


def test_a_job_that_recorded_its_own_end_gets_time_to_exit():
    assert not must_stop(ending("COMPLETED", finished=0, checked=10), definition())
    assert must_stop(ending("COMPLETED", finished=0, checked=31), definition())
