"""Retry decisions: deny wins, attempts are bounded, backoff grows with jitter and a cap."""

from __future__ import annotations

import random
from datetime import timedelta

from pgsched.engine.retry import Backoff, RetryPolicy

RNG = random.Random(7)


def decide(policy, reason, attempt=1, hint=None):
    return policy.decide(reason=reason, attempt=attempt, hint=hint, rng=RNG)


def test_infrastructure_failures_are_retried_by_default_application_failures_are_not():
    policy = RetryPolicy()
    assert decide(policy, "HeartbeatLost").retry
    assert decide(policy, "Orphaned").retry
    assert decide(policy, "LaunchFailed").retry
    assert not decide(policy, "NonZeroExit").retry


def test_deny_list_wins_even_when_the_allow_list_matches():
    policy = RetryPolicy(retry_on=("NonZeroExit", "*"), never_retry_on=("NonZeroExit",))
    decision = decide(policy, "NonZeroExit")
    assert not decision.retry and "neverRetryOn" in decision.why


def test_wildcard_allows_any_reason_but_not_a_denied_one():
    policy = RetryPolicy(retry_on=("*",), never_retry_on=("BudgetExhausted",))
    assert decide(policy, "ValueError").retry
    assert not decide(policy, "BudgetExhausted").retry


def test_sdk_veto_wins_over_the_allow_list_and_sdk_allow_needs_no_listing():
    policy = RetryPolicy(retry_on=("*",))
    assert not decide(policy, "BudgetExhausted", hint="never").retry
    assert decide(RetryPolicy(retry_on=()), "TimeoutError", hint="retry").retry


def test_max_attempts_bounds_retries():
    policy = RetryPolicy(max_attempts=3, retry_on=("NonZeroExit",))
    assert decide(policy, "NonZeroExit", attempt=2).retry
    decision = decide(policy, "NonZeroExit", attempt=3)
    assert not decision.retry and "maxAttempts 3" in decision.why


def test_cancelled_runs_are_never_retried():
    assert not decide(RetryPolicy(retry_on=("*",)), "Cancelled").retry


def test_backoff_is_exponential_capped_and_jittered_within_bounds():
    backoff = Backoff(initial_seconds=10, max_seconds=100, multiplier=2, jitter=0.2)
    rng = random.Random(1)
    for attempt, base in [(1, 10), (2, 20), (3, 40), (4, 80), (5, 100), (9, 100)]:
        for _ in range(50):
            delay = backoff.delay(attempt, rng=rng).total_seconds()
            assert base * 0.8 - 1e-9 <= delay <= min(100, base * 1.2) + 1e-9
    assert Backoff(initial_seconds=5, jitter=0).delay(1, rng=rng) == timedelta(seconds=5)


def test_policy_survives_a_json_round_trip():
    policy = RetryPolicy(
        max_attempts=4, backoff=Backoff(1, 9, 3, 0.5), retry_on=("A",), never_retry_on=("B",)
    )
    assert RetryPolicy.from_json(policy.to_json()) == policy
