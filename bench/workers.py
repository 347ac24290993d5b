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

import contextlib
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection as Channel
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal, TypeVar

Method = Literal["raw", "dispatch", "claim"]
Complete = Literal["none", "bulk", "lease"]

T = TypeVar("T")
R = TypeVar("R")
CLOCK = time.CLOCK_MONOTONIC  # system-wide on Linux: comparable across processes
START_LEAD = 0.6  # seconds between handing out tasks and the common start
# Seconds a measurement may run past its window (its last claim call) before its workers
# count as lost: the slowest call seen, 16 workers at batch 50, takes well under one.
GRACE = 30.0


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
    """A measurement did not come back: a worker process died, or hung past its deadline."""


Member = tuple[BaseProcess, Channel]


def _serve(channel: Channel) -> None:
    """A crew member's life: run each ``(function, task)`` it is sent, send back
    ``(True, result)`` or ``(False, traceback)``; end when sent None or orphaned."""
    while True:
        try:
            job = channel.recv()
        except EOFError:
            return
        if job is None:
            return
        function, task = job
        try:
            answer = (True, function(task))
        except Exception:
            answer = (False, traceback.format_exc())
        channel.send(answer)


class Crew:
    """``size`` warm claimer processes, each with a pipe of its own.

    Why not ``multiprocessing.Pool``: a pool replaces a worker that dies (killed from
    outside, say) but loses its task, so its ``map`` waits out any deadline; and its
    ``terminate`` then waits forever for the queue lock a worker killed mid-read still
    holds. Here a member that dies is seen at once (its process sentinel), a late one is
    killed at the deadline, and either way the whole crew is replaced and
    :class:`CrewLost` raised, so the caller can set the measurement up again and retry.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._members: list[Member] = []
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        for _ in range(self.size):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()
            self._members.append((process, mine))
        self._gather(_warm, list(range(self.size)), timeout=120)

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
            return self._gather(function, tasks, timeout=timeout)
        except CrewLost:
            self._stop()
            self._start()
            raise

    def _gather(self, function: Callable[[T], R], tasks: list[T], *, timeout: float) -> list[R]:
        busy = self._members[: len(tasks)]
        for (process, channel), task in zip(busy, tasks, strict=True):
            try:
                channel.send((function, task))
            except OSError:  # a broken pipe: the member died while idle
                raise CrewLost(
                    f"a worker process died before running {function.__name__}"
                    f" (exit code {process.exitcode})"
                ) from None
        answers: dict[int, tuple[bool, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < len(busy):
            waiting = [index for index in range(len(busy)) if index not in answers]
            handles = [busy[i][1] for i in waiting] + [busy[i][0].sentinel for i in waiting]
            if not wait(handles, timeout=max(0.0, deadline - time.monotonic())):
                raise CrewLost(f"{function.__name__} did not finish within {timeout:.0f}s")
            for index in waiting:
                process, channel = busy[index]
                with contextlib.suppress(EOFError):  # EOF: it died, said below
                    if channel.poll():
                        answers[index] = channel.recv()
                        continue
                if not process.is_alive():
                    process.join()  # its exit code
                    raise CrewLost(
                        f"a worker process running {function.__name__} died"
                        f" (exit code {process.exitcode})"
                    )
        failures = [text for ok, text in answers.values() if not ok]
        if failures:
            raise RuntimeError(f"{function.__name__} failed in a worker process:\n{failures[0]}")
        return [answers[index][1] for index in range(len(busy))]

    def _stop(self) -> None:
        """Kill every member (a late one may be stuck anywhere) and wait for it."""
        for process, channel in self._members:
            process.kill()
            process.join(timeout=10)
            channel.close()
        self._members = []

    def close(self) -> None:
        """Ask every member to end, give each 10 s, then stop the crew (killing a straggler;
        an ended member is not signalled)."""
        for _, channel in self._members:
            with contextlib.suppress(OSError):
                channel.send(None)
        for process, _ in self._members:
            process.join(timeout=10)
        self._stop()

    def __enter__(self) -> Crew:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
