"""Measuring claim throughput: one table state, N worker processes, one arm at a time.

Shared by ``throughput``, ``scaling`` and ``locks``.
Before every measurement the runs table is emptied, refilled with due QUEUED runs spread
over the definitions and VACUUM ANALYZEd, so every arm of a cell starts from the same
state. Inside a round the arms of a cell run back to back, in an order rotated from round
to round; the figures are medians over rounds and ratios are medians of per-round ratios.

The queue is sized from the best rate seen so far for the same cell and arm (with head
room), so a measurement normally runs for the full window; if the queue drains first,
throughput is still exact (claims over the time until the last worker stopped).
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from psycopg import conninfo

from bench import queries, seed
from bench.environment import Environment
from bench.stats import median, paired_ratio
from bench.workers import GRACE, START_LEAD, Complete, Crew, CrewLost, Method, Task, clock
from pgsched.db.connection import Connection

# Below ~30,000 rows the planner may run the seed's `WHERE id IN (subquery)` as a hash
# semi join over a sequential scan of the whole table (26 ms instead of 1.3 ms for a batch
# of 50 at 10,000 rows): never measure the baseline in that regime.
MIN_QUEUE = 40_000
QUICK_MIN_QUEUE = 2_000
MAX_QUEUE = 400_000


@dataclass(frozen=True)
class Arm:
    """One way of claiming, compared with others on the same cell.

    ``method`` is a :data:`bench.workers.Method`, or ``pgbench``: the raw query as a
    pgbench custom script (``-c N -j N -T seconds``), C clients with no Python at all.
    """

    name: str
    method: Method | str
    complete: Complete = "none"
    unlocked: bool = False  # the claim without its locks, installed by bench/planted.py
    try_locks: bool = False  # the dispatcher's try-first lock mode


@dataclass(frozen=True)
class Measurement:
    claims: int
    seconds: float
    calls: int
    at_cap: int
    drained: bool
    cpu: float | None = None  # client + server CPU seconds (None: not measured, pgbench)

    @property
    def rate(self) -> float:
        return self.claims / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_claim_us(self) -> float | None:
        return self.cpu / self.claims * 1e6 if self.cpu is not None and self.claims else None


@dataclass
class Series:
    """Rates of every (cell, arm) over the rounds of one benchmark, on one database."""

    crew: Crew
    conn: Connection
    dsn: str
    seconds: float
    env: Environment | None = None  # needed by pgbench arms only
    min_queue: int = MIN_QUEUE  # smaller only for smoke runs, where plans do not matter
    grace: float = GRACE  # seconds past a window before its workers count as lost
    rates: dict[tuple[Hashable, str], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    at_cap: dict[tuple[Hashable, str], int] = field(default_factory=lambda: defaultdict(int))
    cpu: dict[tuple[Hashable, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    lost: list[str] = field(default_factory=list)  # measurements taken again, and why
    _best: dict[tuple[Hashable, str], float] = field(default_factory=dict)

    def cell(
        self, cell: Hashable, arms: Sequence[Arm], *, workers: int, batch: int, round_no: int
    ) -> None:
        shift = round_no % len(arms)
        for arm in [*arms[shift:], *arms[:shift]]:
            queue = self._queue(cell, arm, batch)
            measured = self.measure(arm, workers=workers, batch=batch, queue=queue)
            if measured.drained and arm.method == "pgbench":
                # pgbench keeps running (and counting) empty claims once the queue is
                # gone, so a drained run understates the rate: measure again, deeper.
                queue = min(MAX_QUEUE, queue * 3)
                measured = self.measure(arm, workers=workers, batch=batch, queue=queue)
            key = (cell, arm.name)
            self._best[key] = max(self._best.get(key, 0.0), measured.rate)
            self.rates[key].append(measured.rate)
            self.at_cap[key] += measured.at_cap
            cpu = measured.cpu_per_claim_us
            if cpu is not None:
                self.cpu[key].append(cpu)
            print(
                f"  r{round_no} {cell!s:28s} {arm.name:22s} w={workers:<2d} b={batch:<2d}"
                f" {measured.rate:8.0f}/s ({measured.claims} in {measured.seconds:.2f}s"
                f"{', drained' if measured.drained else ''})"
                + (f" {cpu:6.0f} us CPU/claim" if cpu is not None else ""),
                flush=True,
            )

    def measure(self, arm: Arm, *, workers: int, batch: int, queue: int) -> Measurement:
        """Refill the queue with ``queue`` due runs, then let ``workers`` processes claim
        (once more from scratch if a worker process was lost on the way)."""
        try:
            return self._measure(arm, workers=workers, batch=batch, queue=queue)
        except CrewLost as lost:
            print(f"  ({lost}; measuring again)", flush=True)
            self.lost.append(f"{arm.name}, {workers} workers, batch {batch}: {lost}")
            return self._measure(arm, workers=workers, batch=batch, queue=queue)

    def _measure(self, arm: Arm, *, workers: int, batch: int, queue: int) -> Measurement:
        seed.fresh_queue(self.conn, queue)
        if arm.method == "pgbench":
            return self._pgbench(workers=workers, batch=batch)
        start = clock() + START_LEAD
        task = Task(
            dsn=self.dsn,
            method=arm.method,
            batch=batch,
            start_at=start,
            stop_at=start + self.seconds,
            complete=arm.complete,
            unlocked=arm.unlocked,
            try_locks=arm.try_locks,
        )
        outcomes = self.crew.run([task] * workers, timeout=self.seconds + START_LEAD + self.grace)
        ended = max(item.ended for item in outcomes)
        return Measurement(
            claims=sum(item.claims for item in outcomes),
            seconds=ended - start,
            calls=sum(item.calls for item in outcomes),
            at_cap=sum(item.at_cap for item in outcomes),
            drained=ended < start + self.seconds - 0.05,
            cpu=sum(item.client_cpu + item.server_cpu for item in outcomes),
        )

    def _pgbench(self, *, workers: int, batch: int) -> Measurement:
        assert self.env is not None, "pgbench arms need the environment"
        params = conninfo.conninfo_to_dict(self.dsn)
        seconds = max(1, round(self.seconds))
        command = [
            *self.env.pg_tool("pgbench"),
            *("-h", str(params["host"]), "-p", str(params["port"]), "-U", str(params["user"])),
            *("-n", "-f", str(queries.RAW_CLAIM_SCRIPT), "-D", f"batch={batch}"),
            *("-c", str(workers), "-j", str(workers), "-T", str(seconds)),
            str(params["dbname"]),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, cwd="/", check=False,
                timeout=seconds + self.grace,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise CrewLost(f"pgbench did not finish within {seconds + self.grace:.0f}s") from None
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed: {done.stderr.strip()}")
        transactions = int(_grab(r"number of transactions actually processed: (\d+)", done.stdout))
        tps = float(_grab(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout))
        row = self.conn.execute(queries.get("count_claims")).fetchone()
        assert row is not None
        return Measurement(
            claims=row["running"],
            seconds=transactions / tps if tps else float(seconds),
            calls=transactions,
            at_cap=0,
            drained=row["queued"] == 0,
        )

    def lost_notes(self) -> list[str]:
        """A report's notes on measurements taken again (none when none were)."""
        if not self.lost:
            return []
        return [
            f"measured again after workers were lost ({len(self.lost)}): " + "; ".join(self.lost)
        ]

    def median(self, cell: Hashable, arm: str) -> float:
        return median(self.rates[(cell, arm)])

    def ratio(self, cell: Hashable, arm: str, baseline: str) -> float:
        return paired_ratio(self.rates[(cell, arm)], self.rates[(cell, baseline)])

    def cpu_median(self, cell: Hashable, arm: str) -> float:
        """Median CPU microseconds (client + server) per claimed run."""
        return median(self.cpu[(cell, arm)])

    def cpu_ratio(self, cell: Hashable, arm: str, baseline: str) -> float:
        """Claims per CPU-second relative to the baseline (baseline CPU / arm CPU): read
        like a throughput ratio, but insensitive to other load on the machine."""
        return paired_ratio(self.cpu[(cell, baseline)], self.cpu[(cell, arm)])

    def _queue(self, cell: Hashable, arm: Arm, batch: int) -> int:
        rate = self._best.get((cell, arm.name), 2_000.0 * min(batch, 20))
        seconds = max(1, round(self.seconds)) if arm.method == "pgbench" else self.seconds
        return int(min(MAX_QUEUE, max(self.min_queue, rate * seconds * 1.4)))


def _grab(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"unexpected pgbench output (no {pattern!r}):\n{text}")
    return match.group(1)
