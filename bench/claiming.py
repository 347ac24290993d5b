"""Measuring claim throughput: one table state, N worker processes, one arm at a time.

Shared by ``throughput`` (issue 2), ``scaling`` (issue 7 #1) and ``locks`` (issue 7 #4).
Before every measurement the runs table is emptied, refilled with due QUEUED runs spread
over the definitions and VACUUM ANALYZEd, so every arm of a cell starts from the same
state. Inside a round the arms of a cell run back to back, in an order rotated from round
to round; the figures are medians over rounds and ratios are medians of per-round ratios.

The queue is sized from the best rate seen so far for the same cell and arm (with head
room), so a measurement normally runs for the full window; if the queue drains first,
throughput is still exact (claims over the time until the last worker stopped).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from bench import seed
from bench.stats import median, paired_ratio
from bench.workers import START_LEAD, Complete, Crew, Method, Task, clock
from pgsched.db.connection import Connection

MIN_QUEUE = 2_000
MAX_QUEUE = 400_000


@dataclass(frozen=True)
class Arm:
    """One way of claiming, compared with others on the same cell."""

    name: str
    method: Method
    complete: Complete = "none"
    lock_definitions: bool = True


@dataclass(frozen=True)
class Measurement:
    claims: int
    seconds: float
    calls: int
    at_cap: int
    drained: bool

    @property
    def rate(self) -> float:
        return self.claims / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Series:
    """Rates of every (cell, arm) over the rounds of one benchmark, on one database."""

    crew: Crew
    conn: Connection
    dsn: str
    seconds: float
    rates: dict[tuple[Hashable, str], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    at_cap: dict[tuple[Hashable, str], int] = field(default_factory=lambda: defaultdict(int))
    _best: dict[tuple[Hashable, str], float] = field(default_factory=dict)

    def cell(
        self, cell: Hashable, arms: Sequence[Arm], *, workers: int, batch: int, round_no: int
    ) -> None:
        shift = round_no % len(arms)
        for arm in [*arms[shift:], *arms[:shift]]:
            measured = self.measure(
                arm, workers=workers, batch=batch, queue=self._queue(cell, arm, batch)
            )
            key = (cell, arm.name)
            self._best[key] = max(self._best.get(key, 0.0), measured.rate)
            self.rates[key].append(measured.rate)
            self.at_cap[key] += measured.at_cap
            print(
                f"  r{round_no} {cell!s:28s} {arm.name:22s} w={workers:<2d} b={batch:<2d}"
                f" {measured.rate:8.0f}/s ({measured.claims} in {measured.seconds:.2f}s"
                f"{', drained' if measured.drained else ''})",
                flush=True,
            )

    def measure(self, arm: Arm, *, workers: int, batch: int, queue: int) -> Measurement:
        """Refill the queue with ``queue`` due runs, then let ``workers`` processes claim."""
        seed.fresh_queue(self.conn, queue)
        start = clock() + START_LEAD
        task = Task(
            dsn=self.dsn,
            method=arm.method,
            batch=batch,
            start_at=start,
            stop_at=start + self.seconds,
            complete=arm.complete,
            lock_definitions=arm.lock_definitions,
        )
        outcomes = self.crew.run([task] * workers)
        ended = max(item.ended for item in outcomes)
        return Measurement(
            claims=sum(item.claims for item in outcomes),
            seconds=ended - start,
            calls=sum(item.calls for item in outcomes),
            at_cap=sum(item.at_cap for item in outcomes),
            drained=ended < start + self.seconds - 0.05,
        )

    def median(self, cell: Hashable, arm: str) -> float:
        return median(self.rates[(cell, arm)])

    def ratio(self, cell: Hashable, arm: str, baseline: str) -> float:
        return paired_ratio(self.rates[(cell, arm)], self.rates[(cell, baseline)])

    def _queue(self, cell: Hashable, arm: Arm, batch: int) -> int:
        rate = self._best.get((cell, arm.name), 2_000.0 * min(batch, 20))
        return int(min(MAX_QUEUE, max(MIN_QUEUE, rate * self.seconds * 1.4)))
