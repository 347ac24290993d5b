"""Each namespace's budget on the run API (I14): one tenant's flood is its own.

A namespace has a token bucket (requests a second, and bursts), database call slots (a
request queues briefly for one) and a count of open long polls. A request over any of them
is refused (429, with how long to wait) before it costs the database anything, so a namespace that floods
spends its own budget and never another's. Requests whose lease failed its check have one
budget of their own (:data:`UNVERIFIED`): a forger cannot spend a real namespace's.

Used from the server's event loop alone, so nothing here locks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# The budget of requests whose lease failed its check (no namespace can be trusted).
UNVERIFIED = ""
# How long a request queues for one of its namespace's database call slots before 429.
# The queue is bounded by the namespace's rate: at most rate x this many requests wait.
SLOT_WAIT_SECONDS = 2.0


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """Take a token: 0.0 when there was one, else the seconds until there is."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate


@dataclass(frozen=True)
class Limits:
    rate: float
    burst: int
    concurrency: int
    waiters: int


@dataclass
class Budget:
    bucket: TokenBucket
    waiting: int = 0
    slots: asyncio.Semaphore | None = None  # made on the event loop, at first use


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused (``why``: the budget's part, for the metric), and when to
    come back (``Retry-After``)."""

    why: str
    reason: str
    retry_after_seconds: float


@dataclass
class Budgets:
    limits: Limits
    clock: Callable[[], float] = time.monotonic
    _budgets: dict[str, Budget] = field(default_factory=dict)

    def budget(self, namespace: str) -> Budget:
        found = self._budgets.get(namespace)
        if found is None:
            bucket = TokenBucket(self.limits.rate, self.limits.burst, self.clock)
            found = self._budgets[namespace] = Budget(bucket)
        return found

    def admit(self, namespace: str) -> Refusal | None:
        """Spend one request of ``namespace``'s rate; a refusal if it has none left."""
        wait = self.budget(namespace).bucket.take()
        if wait > 0:
            return Refusal(
                "rate",
                f"namespace {_shown(namespace)} is over its {self.limits.rate:g} requests a"
                f" second (PGSCHED_RUN_API_NAMESPACE_RATE)",
                wait,
            )
        return None

    async def start_call(self, namespace: str) -> Refusal | None:
        """Take a database call slot, queueing for one up to :data:`SLOT_WAIT_SECONDS` (a
        burst of cancels wakes every long poll of a namespace at once: they queue, they
        are not refused); :meth:`end_call` gives it back."""
        budget = self.budget(namespace)
        if budget.slots is None:
            budget.slots = asyncio.Semaphore(self.limits.concurrency)
        try:
            await asyncio.wait_for(budget.slots.acquire(), SLOT_WAIT_SECONDS)
        except TimeoutError:
            return Refusal(
                "concurrency",
                f"namespace {_shown(namespace)} has had {self.limits.concurrency} run API calls"
                f" in flight for {SLOT_WAIT_SECONDS:g}s, its limit"
                " (PGSCHED_RUN_API_NAMESPACE_CONCURRENCY)",
                0.5,
            )
        return None

    def end_call(self, namespace: str) -> None:
        budget = self.budget(namespace)
        assert budget.slots is not None
        budget.slots.release()

    def start_wait(self, namespace: str) -> Refusal | None:
        budget = self.budget(namespace)
        if budget.waiting >= self.limits.waiters:
            return Refusal(
                "waiters",
                f"namespace {_shown(namespace)} has {budget.waiting} cancel long polls open,"
                f" its limit (PGSCHED_RUN_API_NAMESPACE_WAITERS)",
                1.0,
            )
        budget.waiting += 1
        return None

    def end_wait(self, namespace: str) -> None:
        self.budget(namespace).waiting -= 1


def _shown(namespace: str) -> str:
    return repr(namespace) if namespace != UNVERIFIED else "(unverified leases)"
