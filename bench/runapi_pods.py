"""Job pods for the run API benchmarks: RUNNING runs, and OS processes that beat for them.

- :func:`running_runs` makes runs RUNNING with the engine's own functions (definitions
  upserted from a spec, ``runs.run_now``, ``dispatch.run_once``), as a tick does.
- :class:`Fleet` runs tasks in fresh OS processes (spawned, so nothing of the benchmark
  process is shared) that get ready, then start together at one instant of the
  system-wide monotonic clock.
- :class:`ApiPods`: one process runs the pods' own code for many runs — a
  ``pgsched.runner.heartbeat.HeartbeatLoop`` over a
  ``pgsched.runner.runapi_client.RunApiClient`` each, as the in-pod sidecar does: a thread
  and a keep-alive HTTPS connection per run, a beat every interval and the cancel long
  poll between beats; every request timed (:class:`Timed`).
- :class:`SessionPods`: today's design, the baseline: each run holds a database session
  of its own (a ``pgsched_job`` login), beats with ``pgsched.engine.lease.heartbeat`` and
  LISTENs for a cancel between beats, retrying a failure after 1 s as the loop did.
- :class:`Flood`: keep-alive connections sending heartbeats with genuine leases as fast
  as they can, up to a rate, never backing off.
"""

from __future__ import annotations

import http.client
import logging
import multiprocessing
import os
import random
import re
import ssl
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from typing import Any
from urllib.parse import urlsplit

CLOCK = time.CLOCK_MONOTONIC  # system-wide on Linux: comparable across processes
# The heartbeat loop's retry after a failed beat, as the session-era loop had it
# (pgsched.runner.heartbeat.RETRY_SECONDS, unchanged).
RETRY_SECONDS = 1.0


def clock() -> float:
    return time.clock_gettime(CLOCK)


# -- RUNNING runs, made by the engine ------------------------------------------------------


@dataclass(frozen=True)
class RunRef:
    run_id: int
    token: str
    namespace: str


def running_runs(
    dsn: str,
    count: int,
    namespaces: list[str],
    *,
    heartbeat: dict[str, int],
    per_definition: int = 50,
    prefix: str = "bench",
) -> list[RunRef]:
    """``count`` RUNNING runs over ``namespaces`` (round robin by definition), each
    definition capped at and given ``per_definition`` runs; ``heartbeat`` is the spec's
    ``heartbeat`` section (interval and timeouts the reaper judges them by)."""
    from datetime import UTC, datetime

    from pgsched import spec as spec_module
    from pgsched.db import connection
    from pgsched.engine import definitions, dispatch, launcher, runs

    made: list[RunRef] = []
    created = datetime.now(UTC)
    with connection.connect(dsn, application_name="pgsched-bench-setup") as conn:
        index = 0
        while len(made) < count:
            namespace = namespaces[index % len(namespaces)]
            name = f"{prefix}-{index}"
            size = min(per_definition, count - len(made))
            spec = {
                "schedule": "0 0 1 1 *",  # never due during a benchmark: only run-now runs
                "maxConcurrentRuns": per_definition,
                "heartbeat": heartbeat,
            }
            parsed = spec_module.parse(
                spec, hash_seed=f"{namespace}/{name}", anchor=created, now=created
            )
            key = definitions.DefinitionKey(
                id=uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"),
                namespace=namespace,
                name=name,
                generation=1,
                created_at=created,
            )
            definition = definitions.upsert(conn, key, parsed, raw_spec=spec)
            for n in range(size):
                runs.run_now(conn, definition.id, token=f"{name}-{n}")
            claimed = dispatch.run_once(
                conn, launcher.NullLauncher(), batch_size=size, definition_ids=[definition.id]
            ).claimed
            assert len(claimed) == size, f"{name}: {len(claimed)} of {size} runs started"
            made.extend(RunRef(run.id, str(run.lease_token), namespace) for run in claimed)
            index += 1
    return made


# -- processes that start together -----------------------------------------------------------


class FleetFailed(RuntimeError):
    """A pod process died, failed or did not answer in time."""


@dataclass
class Fleet:
    """Tasks, each in a fresh spawned process, started together; :meth:`run` returns
    their results in task order."""

    ready_timeout: float = 300.0
    lead: float = 1.0  # seconds between the last process being ready and the common start

    def run(
        self,
        tasks: list[Any],
        *,
        timeout: float,
        on_start: Callable[[float], None] | None = None,
    ) -> list[Any]:
        """Run ``tasks``; ``on_start`` is called with the common start instant before it."""
        context = multiprocessing.get_context("spawn")
        processes, pipes = [], []
        try:
            for task in tasks:
                parent, child = context.Pipe()
                process = context.Process(target=_entry, args=(task, child), daemon=True)
                process.start()
                child.close()
                processes.append(process)
                pipes.append(parent)
            deadline = time.monotonic() + self.ready_timeout
            for pipe in pipes:
                self._expect(pipe, "ready", deadline)
            start_at = clock() + self.lead
            if on_start is not None:
                on_start(start_at)
            for pipe in pipes:
                pipe.send(start_at)
            deadline = time.monotonic() + self.lead + timeout
            return [self._expect(pipe, "done", deadline) for pipe in pipes]
        finally:
            for process in processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=5)

    @staticmethod
    def _expect(pipe: Pipe, what: str, deadline: float) -> Any:
        if not pipe.poll(max(0.0, deadline - time.monotonic())):
            raise FleetFailed(f"a pod process was not {what} in time")
        try:
            kind, value = pipe.recv()
        except EOFError:
            raise FleetFailed(f"a pod process died before it was {what}") from None
        if kind == "failed":
            raise FleetFailed(f"a pod process failed:\n{value}")
        assert kind == what, (kind, what)
        return value


def _entry(task: Any, pipe: Pipe) -> None:
    try:
        prepared = task.prepare()
        pipe.send(("ready", None))
        start_at = pipe.recv()
        pipe.send(("done", prepared(start_at)))
    except BaseException:
        pipe.send(("failed", traceback.format_exc()))


# -- what a pod records -------------------------------------------------------------------


def outcome_of(error: BaseException | None) -> str:
    """A short name for how a request ended: ok, 429 rate / in flight / long polls, 503,
    another status, a timeout or a connection error."""
    if error is None:
        return "ok"
    text = str(error)
    status = 0
    for code in (429, 503, 502, 504, 401, 400, 404, 413):  # RunApiError: "...: 429 Too Many"
        if f": {code} " in text:
            status = code
            break
    if status == 429:
        text = str(error)
        if "requests a second" in text:
            return "429 rate"
        if "in flight" in text:
            return "429 in flight"
        if "long polls" in text:
            return "429 long polls"
        return "429"
    if status:
        return str(status)
    if "no answer within" in text:
        return "timeout"
    return "connection error"


def shown(error: BaseException) -> str:
    """An error's text with the run, port and counts taken out, so equal errors count once."""
    text = re.sub(r"/v1/runs/\d+", "/v1/runs/{run}", str(error))
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:{port}", " ".join(text.split()))
    text = re.sub(r"port \d+", "port {port}", text)
    return re.sub(r"has \d+ ", "has N ", text)


@dataclass
class Record:
    """One process's requests: (started at, seconds, outcome) for beats and long polls."""

    beats: list[tuple[float, float, str]] = field(default_factory=list)
    polls: list[tuple[float, float, str]] = field(default_factory=list)
    first_ok: dict[int, float] = field(default_factory=dict)  # run id -> first beat answered
    cpu_seconds: float = 0.0
    late_start: float = 0.0
    threads: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # shown(error) -> how many
    connected: int = 0  # session pods: how many got a database session


class Timed:
    """Wraps a pod's ``RunApiClient``: every heartbeat and long poll is timed."""

    def __init__(self, client: Any, record: Record, lock: threading.Lock) -> None:
        self._client = client
        self._record = record
        self._lock = lock
        self.run_id = client.run_id

    def heartbeat(self, *, timeout: float | None = None) -> Any:
        return self._timed(self._record.beats, lambda: self._client.heartbeat(timeout=timeout))

    def wait_while(self, state: Any, seconds: float, *, timeout: float | None = None) -> Any:
        return self._timed(
            self._record.polls, lambda: self._client.wait_while(state, seconds, timeout=timeout)
        )

    def close(self) -> None:
        self._client.close()

    def _timed(self, into: list[tuple[float, float, str]], call: Callable[[], Any]) -> Any:
        started = clock()
        try:
            answer = call()
        except Exception as error:
            with self._lock:
                into.append((started, clock() - started, outcome_of(error)))
                self._record.errors[shown(error)] += 1
            raise
        ended = clock()
        with self._lock:
            into.append((started, ended - started, "ok"))
            if into is self._record.beats:
                self._record.first_ok.setdefault(self.run_id, ended)
        return answer


def _client(url: str, ca: str, run_id: int, token: str) -> Any:
    from pgsched.engine.lease import Lease
    from pgsched.runner.runapi_client import RunApiClient

    return RunApiClient(url, ca, Lease(run_id, uuid.UUID(token)))


def _loop(client: Any, interval: float) -> Any:
    from pgsched.runner.heartbeat import HeartbeatLoop

    return HeartbeatLoop(client, interval_seconds=interval)


def _quiet_pods() -> None:
    """The pods' own log lines (a warning per failed beat, sparingly) are not collected:
    counted in :class:`Record` instead."""
    logging.getLogger("pgsched").setLevel(logging.ERROR)


# -- the tasks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiPods:
    """Heartbeat loops of ``runs`` through the run API at ``url``, from start to ``seconds``
    later; each run's first beat at a random instant of its first interval (or of the
    first ``ramp`` seconds, if longer)."""

    url: str
    ca: str
    runs: list[tuple[int, str]]
    interval: float
    seconds: float
    seed: int = 0
    ramp: float = 0.0
    nice: int = 0

    def prepare(self) -> Callable[[float], Record]:
        if self.nice:
            os.nice(self.nice)
        _quiet_pods()
        record, lock = Record(threads=len(self.runs)), threading.Lock()
        clients = [Timed(_client(self.url, self.ca, r, t), record, lock) for r, t in self.runs]
        rng = random.Random(self.seed)
        offsets = [rng.uniform(0, max(self.interval, self.ramp)) for _ in clients]

        def go(start_at: float) -> Record:
            _sleep_until(start_at)
            record.late_start = clock() - start_at
            cpu = time.process_time()
            loops = []
            order = sorted(range(len(clients)), key=lambda i: offsets[i])
            for i in order:
                _sleep_until(start_at + offsets[i])
                loops.append(_loop(clients[i], self.interval).start())
            _sleep_until(start_at + self.seconds)
            for loop in loops:
                loop.stop(timeout=0)
            record.cpu_seconds = time.process_time() - cpu
            with lock:
                return Record(
                    list(record.beats),
                    list(record.polls),
                    dict(record.first_ok),
                    record.cpu_seconds,
                    record.late_start,
                    record.threads,
                    errors=Counter(record.errors),
                )

        return go


TOO_MANY = ("too many clients", "remaining connection slots are reserved")


@dataclass(frozen=True)
class SessionPods:
    """Today's design: each run's pod holds a database session of its own as ``dsn``'s
    login, beats with ``pgsched.engine.lease.heartbeat`` every ``interval`` and LISTENs
    for a cancel between beats; a failure (no session) is retried after 1 s."""

    dsn: str
    runs: list[tuple[int, str]]
    interval: float
    seconds: float
    seed: int = 0

    def prepare(self) -> Callable[[float], Record]:
        from pgsched.db import connection, notices
        from pgsched.engine import lease

        record, lock = Record(threads=len(self.runs)), threading.Lock()
        connected: set[int] = set()
        stop = threading.Event()
        rng = random.Random(self.seed)
        offsets = [rng.uniform(0, self.interval) for _ in self.runs]

        def pod(run_id: int, token: str) -> None:
            run_lease = lease.Lease(run_id, uuid.UUID(token))
            conn = None
            listening = False
            while not stop.is_set():
                started = clock()
                try:
                    if conn is None:
                        conn = connection.connect(
                            self.dsn, application_name=f"pgsched-sidecar-{run_id}"
                        )
                        listening = False
                        with lock:
                            connected.add(run_id)
                    state = lease.heartbeat(conn, run_lease)
                    ended = clock()
                    with lock:
                        record.beats.append((started, ended - started, "ok"))
                        record.first_ok.setdefault(run_id, ended)
                    if state == "lost":
                        return
                    if not listening:
                        lease.listen(conn, run_lease)
                        listening = True
                    notices.wait(conn, self.interval - (clock() - started), stop)
                except Exception as error:
                    text = str(error)
                    kind = "too many clients" if any(t in text for t in TOO_MANY) else "error"
                    with lock:
                        record.beats.append((started, clock() - started, kind))
                        record.errors[shown(error)[:300]] += 1
                    if conn is not None:
                        conn.close()
                        conn = None
                    stop.wait(max(0.0, min(self.interval, RETRY_SECONDS) - (clock() - started)))
            if conn is not None:
                conn.close()

        def go(start_at: float) -> Record:
            _sleep_until(start_at)
            record.late_start = clock() - start_at
            cpu = time.process_time()
            threads = []
            order = sorted(range(len(self.runs)), key=lambda i: offsets[i])
            for i in order:
                _sleep_until(start_at + offsets[i])
                thread = threading.Thread(target=pod, args=self.runs[i], daemon=True)
                thread.start()
                threads.append(thread)
            _sleep_until(start_at + self.seconds)
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
            record.cpu_seconds = time.process_time() - cpu
            record.connected = len(connected)
            return record

        return go


@dataclass(frozen=True)
class Flood:
    """``connections`` keep-alive connections (a thread each) sending ``POST
    .../heartbeat`` with the genuine leases of ``runs``, together at most ``rate`` a
    second, during each of ``windows`` (seconds after the start)."""

    url: str
    ca: str
    runs: list[tuple[int, str]]
    rate: float
    connections: int
    windows: list[tuple[float, float]]
    nice: int = 0

    def prepare(self) -> Callable[[float], dict[str, Any]]:
        if self.nice:
            os.nice(self.nice)
        parts = urlsplit(self.url)
        context = ssl.create_default_context(cadata=self.ca)
        counts: list[Counter[str]] = [Counter() for _ in self.windows]
        lock = threading.Lock()
        interval = self.connections / self.rate  # each connection's share of the rate

        def sender(index: int, start_at: float) -> None:
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, context=context)
            mine: list[Counter[str]] = [Counter() for _ in self.windows]
            n = index
            for w, (begin, end) in enumerate(self.windows):
                _sleep_until(start_at + begin)
                due = clock()
                while clock() < start_at + end:
                    run_id, token = self.runs[n % len(self.runs)]
                    n += self.connections
                    try:
                        conn.request(
                            "POST",
                            f"/v1/runs/{run_id}/heartbeat",
                            headers={"Authorization": f"Bearer {token}"},
                        )
                        response = conn.getresponse()
                        response.read()
                        mine[w][str(response.status)] += 1
                    except (OSError, http.client.HTTPException):
                        mine[w]["connection error"] += 1
                        conn.close()
                    due += interval
                    late = due - clock()
                    if late > 0:
                        time.sleep(late)
                    elif late < -1.0:
                        due = clock()  # behind by a second: no catching up in a burst
            conn.close()
            with lock:
                for w, counter in enumerate(mine):
                    counts[w].update(counter)

        def go(start_at: float) -> dict[str, Any]:
            cpu = time.process_time()
            threads = [
                threading.Thread(target=sender, args=(i, start_at), daemon=True)
                for i in range(self.connections)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return {
                "counts": [dict(counter) for counter in counts],
                "cpu_seconds": time.process_time() - cpu,
            }

        return go


def _sleep_until(at: float) -> None:
    left = at - clock()
    if left > 0:
        time.sleep(left)
