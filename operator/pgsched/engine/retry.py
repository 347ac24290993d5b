"""Retry policy: pure decisions over the failure-reason vocabulary.

A failed run is retried by inserting a *new* run row (``attempt + 1``, ``scheduled_for =
now + backoff``); the failed row stays as it is (see ``settle``). This module only decides
whether and when.

The decision, in order — the deny list is checked first and always wins:

1. ``maxAttempts`` reached → no retry;
2. the reason is on ``neverRetryOn`` → no retry, even if ``retryOn`` matches too;
3. the job SDK vetoed it (the job kind's ``never_retry_on`` matched the exception) → no;
4. the reason is on ``retryOn`` (``"*"`` matches any reason), or the job kind's
   ``retry_on`` matched → retry after the backoff;
5. otherwise → no retry.

``Cancelled`` is never retried: a user asked for the run to stop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pgsched.engine import starts

# Reasons the engine and the Kubernetes launcher produce; SDK jobs add exception class names.
REASONS = frozenset(
    {
        "HeartbeatLost",
        "Orphaned",
        "NonZeroExit",
        "OOMKilled",
        "DeadlineExceeded",
        "LaunchFailed",
        "JobDeleted",
        "Evicted",
        "Cancelled",
        "OutcomeUnknown",
        *starts.REASONS,
    }
)
# Infrastructure failures are safe to retry by default; an application's own failure
# (NonZeroExit, an exception) is retried only when the user opts in. So is OutcomeUnknown
# (the Job vanished before anyone read its outcome): the work may well have succeeded.
# A workload that could not start (starts.REASONS: an image that cannot be pulled, a
# missing Secret, Pod Security) is not retried either: the next attempt meets the same wall.
DEFAULT_RETRY_ON = ("HeartbeatLost", "Orphaned", "LaunchFailed", "Evicted")
ANY_REASON = "*"


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with a cap and proportional jitter.

    Attempt n (the failed one) waits ``initial * multiplier**(n-1)`` seconds, capped at
    ``max``, then scaled by a random factor in ``[1 - jitter, 1 + jitter]`` (and capped
    again) so a fleet of runs that failed together does not retry in lockstep.
    """

    initial_seconds: float = 10.0
    max_seconds: float = 600.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay(self, failed_attempt: int, *, rng: random.Random) -> timedelta:
        base = min(self.max_seconds, self.initial_seconds * self.multiplier ** (failed_attempt - 1))
        factor = 1.0 + rng.uniform(-self.jitter, self.jitter) if self.jitter else 1.0
        return timedelta(seconds=min(self.max_seconds, base * factor))


@dataclass(frozen=True)
class Decision:
    retry: bool
    why: str
    delay: timedelta = timedelta(0)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    retry_on: tuple[str, ...] = DEFAULT_RETRY_ON
    never_retry_on: tuple[str, ...] = ()

    def decide(
        self, *, reason: str | None, attempt: int, hint: str | None, rng: random.Random
    ) -> Decision:
        reason = reason or "Unknown"
        if reason == "Cancelled":
            return Decision(False, "cancelled runs are never retried")
        if attempt >= self.max_attempts:
            return Decision(
                False, f"attempts used up (attempt {attempt} of maxAttempts {self.max_attempts})"
            )
        if reason in self.never_retry_on or ANY_REASON in self.never_retry_on:
            return Decision(False, f"reason {reason} is on neverRetryOn")
        if hint == "never":
            return Decision(False, f"reason {reason} matches the job kind's never_retry_on")
        if hint == "retry" or reason in self.retry_on or ANY_REASON in self.retry_on:
            delay = self.backoff.delay(attempt, rng=rng)
            why = "the job kind's retry_on matched" if hint == "retry" else "is on retryOn"
            return Decision(True, f"reason {reason} {why}", delay)
        return Decision(
            False, f"reason {reason} is not on retryOn ({', '.join(self.retry_on) or 'empty'})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "maxAttempts": self.max_attempts,
            "backoff": {
                "initialSeconds": self.backoff.initial_seconds,
                "maxSeconds": self.backoff.max_seconds,
                "multiplier": self.backoff.multiplier,
                "jitter": self.backoff.jitter,
            },
            "retryOn": list(self.retry_on),
            "neverRetryOn": list(self.never_retry_on),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetryPolicy:
        """Rebuild a policy stored by :meth:`to_json` (already validated on the way in)."""
        if not data:
            return cls()
        backoff = data.get("backoff", {})
        return cls(
            max_attempts=int(data["maxAttempts"]),
            backoff=Backoff(
                initial_seconds=float(backoff["initialSeconds"]),
                max_seconds=float(backoff["maxSeconds"]),
                multiplier=float(backoff["multiplier"]),
                jitter=float(backoff["jitter"]),
            ),
            retry_on=tuple(data["retryOn"]),
            never_retry_on=tuple(data["neverRetryOn"]),
        )
