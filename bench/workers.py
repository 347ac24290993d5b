"""Claimer processes: each is a separate OS process with its own connection, like a replica.

A :class:`Crew` keeps a pool of spawned processes warm across measurements (spawning and
importing costs about a second per process on a busy 2-core box, far more than a
measurement should absorb). Every worker of a measurement connects, then sleeps until a
shared start instant on the system-wide monotonic clock, claims until the shared stop
instant (or until the queue is drained), and reports what it did and when it ended, so
throughput is ``total claims / (last end - common start)``. Each worker also reports the
CPU time it and its PostgreSQL backend used: CPU per claim hardly depends on what else
runs on the machine, unlike throughput, so it is the steadier measure of cost.

What a worker does per iteration is named by :class:`Task`:

- ``method``: ``raw`` (the seed's query alone, autocommit, as pgbench sends it),
  ``dispatch`` (``dispatch.run_once`` with a no-op launcher — the whole dispatcher), or
  ``claim`` (``dispatch.claim``, the claim transaction without the launch step);
- ``complete``: ``none`` (claim only), ``bulk`` (complete the batch in one statement, so
  RUNNING counts stay small), or ``lease`` (``lease.finish`` per run, the job side's API).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.pool import Pool
from typing import Literal, TypeVar

Method = Literal["raw", "dispatch", "claim"]
Complete = Literal["none", "bulk", "lease"]

T = TypeVar("T")
R = TypeVar("R")
CLOCK = time.CLOCK_MONOTONIC  # system-wide on Linux: comparable across processes
START_LEAD = 0.6  # seconds between handing out tasks and the common start


def clock() -> float:
    return time.clock_gettime(CLOCK)


@dataclass(frozen=True)
class Task:
    dsn: str
    method: Method
    batch: int
    start_at: float
    stop_at: float
    complete: Complete = "none"
    unlocked: bool = False  # the claim without its locks (bench/planted.py)
    try_locks: bool = False


@dataclass(frozen=True)
class Outcome:
    claims: int
    calls: int
    empty_calls: int
    at_cap: int  # candidates passed over because their definition was at its cap
    started: float
    ended: float
    client_cpu: float = 0.0  # seconds of CPU this worker process used while measuring
    server_cpu: float = 0.0  # seconds of CPU its PostgreSQL backend used meanwhile


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) a PostgreSQL backend has used, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def claim_loop(task: Task) -> Outcome:
    """One worker's measurement (runs in a pool process)."""
    from bench import planted, queries
    from pgsched.db import connection
    from pgsched.engine import dispatch, launcher, lease

    planted.use_unlocked_claim(task.unlocked)  # pool processes run locked and unlocked tasks

    raw = queries.raw_claim()
    complete = queries.get("complete_runs")
    null = launcher.NullLauncher()
    owners = dispatch.Owners()  # kept between claims, as the tick keeps its own
    claims = calls = empty = at_cap = 0
    with connection.connect(task.dsn, application_name="pgsched-bench") as conn:
        while clock() < task.start_at:
            time.sleep(min(0.01, max(0.0, task.start_at - clock())))
        started = clock()
        client_cpu = time.process_time()
        server_cpu = backend_cpu(conn.info.backend_pid)
        while clock() < task.stop_at:
            calls += 1
            if task.method == "raw":
                rows = conn.execute(raw, {"batch": task.batch}).fetchall()
                claimed = [(row["id"], row["lease_token"]) for row in rows]
                capped = 0
            else:
                if task.method == "dispatch":
                    result = dispatch.run_once(
                        conn,
                        null,
                        batch_size=task.batch,
                        try_locks=task.try_locks,
                        owners=owners,
                    )
                else:
                    result = dispatch.claim(
                        conn,
                        batch_size=task.batch,
                        try_locks=task.try_locks,
                    )
                claimed = [(run.id, run.lease_token) for run in result.claimed]
                capped = len(result.at_cap)
            at_cap += capped
            if not claimed:
                empty += 1
                if capped:  # the rest is waiting for room, not gone: let others finish
                    time.sleep(0.001)
                    continue
                break  # drained (what is left, if anything, is locked by other workers)
            claims += len(claimed)
            if task.complete == "bulk":
                conn.execute(complete, {"ids": [run_id for run_id, _ in claimed]})
            elif task.complete == "lease":
                for run_id, token in claimed:
                    lease.finish(conn, lease.Lease(run_id, token), "COMPLETED")
        ended = clock()
        client_cpu = time.process_time() - client_cpu
        server_cpu = backend_cpu(conn.info.backend_pid) - server_cpu
    return Outcome(claims, calls, empty, at_cap, started, ended, client_cpu, server_cpu)


def _warm(_: int) -> None:
    """Import everything a worker needs, so the first measurement is not an import race."""
    import bench.queries  # noqa: F401
    import pgsched.engine.dispatch
    import pgsched.engine.lease  # noqa: F401

    time.sleep(0.2)


class CrewLost(RuntimeError):
    """A measurement did not come back in time: a worker process died or hung."""


class Crew:
    """A warm pool of ``size`` claimer processes.

    A pool whose worker process dies (killed from outside, say) replaces the process but
    loses its task, and a plain ``map`` would then wait forever: every call here has a
    deadline; a late one tears the pool down, builds a new one and raises
    :class:`CrewLost`, so the caller can set the measurement up again and retry.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = self._start()

    def _start(self) -> Pool:
        pool = multiprocessing.get_context("spawn").Pool(self.size)
        pool.map_async(_warm, range(self.size), chunksize=1).get(timeout=120)
        return pool

    def run(
        self,
        tasks: list[T],
        function: Callable[[T], R] = claim_loop,  # type: ignore[assignment]
        *,
        timeout: float = 600.0,
    ) -> list[R]:
        """One task per process, all at once (``function`` must be importable by name)."""
        assert len(tasks) <= self.size, "more tasks than processes would serialize them"
        try:
            return self._pool.map_async(function, tasks, chunksize=1).get(timeout=timeout)
        except multiprocessing.TimeoutError:
            self._pool.terminate()
            self._pool = self._start()
            raise CrewLost(f"{function.__name__} did not finish within {timeout:.0f}s") from None

    def close(self) -> None:
        self._pool.close()
        self._pool.join()

    def __enter__(self) -> Crew:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
