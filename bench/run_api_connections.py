"""2,000 RUNNING runs on one PostgreSQL with ``max_connections = 50``: the run API vs a
database session per pod.

One throwaway server started with ``max_connections = 50`` (3 of them reserved for
superusers, as by default), two databases on it, each with the same 2,000 RUNNING runs in
four namespaces, made by the engine's own functions (``runs.run_now`` and
``dispatch.run_once``), every definition with ``heartbeat: {intervalSeconds: 5,
timeoutSeconds: 15, orphanTimeoutSeconds: 15}``.

- **Run API** (the new design): the real server (``pgsched.runapi.serving.Serving``, pool
  size 4) in a process of its own (``bench.runapi_server``); 25 pod processes each drive
  80 runs' heartbeat loops, a thread and a keep-alive HTTPS connection per run: a beat
  every 5 s and the cancel long poll between beats, as the in-pod sidecar does. The first
  beat of each run falls at a random instant of its first interval; the measurement
  window starts one interval later.
- **A session per pod** (today's design, the baseline, same server, same run): the same
  2,000 runs' pods each try to hold a session of their own as a ``pgsched_job`` login,
  beat with ``pgsched.engine.lease.heartbeat`` and LISTEN between beats; a pod whose
  connection is refused tries again a second later, as the heartbeat loop does.

Each second ``pg_stat_activity`` is sampled (the run API's sessions by application name,
the pods' own sessions, every client backend) and the runs' longest silence is read;
every 5 s, and at the end of the window, the reaper itself (``reap.run_once``, at the
database's now, in a transaction rolled back) says which runs it would end. Measured: how
many runs would be reaped, heartbeat round trip p50/p99 (the pods' clock: request sent to
answer read), sessions, how many pods got a session and how many connection attempts were
refused with "too many clients", the run API process's CPU.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import sql

from bench import queries, runapi_pods
from bench.context import Context
from bench.environment import Environment
from bench.report import Report, pyplot, save_plot
from bench.runapi_pods import ApiPods, Fleet, Record, RunRef, SessionPods, clock
from bench.runapi_server import RunApiProcess
from bench.stats import median, percentile, ratio
from devenv.postgres import PostgresServer
from pgsched.db import clock as db_clock
from pgsched.db import connection
from pgsched.engine import reap
from pgsched.k8s.serve.settings import RunApiSettings

NAME = "run_api_connections"
TITLE = "2,000 RUNNING runs on max_connections = 50: run API vs a session per pod"
MAX_CONNECTIONS = 50
NAMESPACES = ["team-a", "team-b", "team-c", "team-d"]
INTERVAL = 5.0
HEARTBEAT = {"intervalSeconds": 5, "timeoutSeconds": 15, "orphanTimeoutSeconds": 15}
REAP_EVERY = 5.0
# The run API's limits: the operator's defaults (RunApiSettings) but for the rate. Each
# run sends a beat and a long poll every interval, 500 runs a namespace 200 requests a
# second, which the default of 50 a second (bursts of 100) would refuse.
DEFAULTS = RunApiSettings()
RATE, BURST = 400.0, 800
CONCURRENCY, WAITERS = DEFAULTS.namespace_concurrency, DEFAULTS.namespace_waiters
POOL_SIZE = DEFAULTS.pool_size
DEFAULT_RATE = DEFAULTS.namespace_rate
APP_NAMES = {
    "pool": "pgsched-run-api",
    "stops": "pgsched-run-api-stops",
    "presence": "pgsched-run-api-presence",
    "run_api": "pgsched-run-api%",
    "sidecar": "pgsched-sidecar-%",
}


@dataclass(frozen=True)
class Size:
    runs: int
    processes: int
    seconds: float  # the run API's measurement window
    baseline_seconds: float  # the baseline's (its outcome is settled within seconds)


FULL = Size(runs=2000, processes=25, seconds=120.0, baseline_seconds=60.0)
QUICK = Size(runs=100, processes=4, seconds=20.0, baseline_seconds=20.0)


def run(ctx: Context) -> Report:
    size = QUICK if ctx.quick else FULL
    if ctx.minutes:
        size = Size(size.runs, size.processes, ctx.minutes * 60, size.baseline_seconds)
    server = PostgresServer(settings={"max_connections": str(MAX_CONNECTIONS)}).start()
    env = Environment(server)
    try:
        with tempfile.TemporaryDirectory(prefix="pgsched-bench-runapi-") as work:
            api = measure_run_api(env, size, Path(work))
            sessions = measure_sessions(env, size)
    finally:
        server.cleanup()
    return report(ctx, size, api, sessions)


# -- watching the database ----------------------------------------------------------------


@dataclass
class Watched:
    samples: list[dict[str, Any]] = field(default_factory=list)
    reap_checks: list[dict[str, Any]] = field(default_factory=list)
    would_reap: dict[str, set[int]] = field(default_factory=dict)
    advanced: dict[str, int] = field(default_factory=dict)
    server_cpu: float = math.nan
    errors: list[str] = field(default_factory=list)


class Watch(threading.Thread):
    """Samples the server each second and asks the reaper every ``REAP_EVERY`` seconds
    from ``begin`` to ``end`` (instants of :func:`runapi_pods.clock`)."""

    def __init__(self, dsn: str, api: RunApiProcess | None = None) -> None:
        super().__init__(name="bench-watch", daemon=True)
        self._dsn = dsn
        self._api = api
        self.begin = self.end = math.inf
        self.found = Watched()
        self._armed = threading.Event()
        self._conn = connection.connect(dsn, application_name="pgsched-bench-watch")

    def arm(self, begin: float, end: float) -> None:
        self.begin, self.end = begin, end
        self._armed.set()
        self.start()

    def run(self) -> None:
        found, conn = self.found, self._conn
        _sleep_until(self.begin)
        cpu_at_begin = self._api.cpu_seconds() if self._api else math.nan
        since = db_clock.now(conn)
        next_reap = self.begin
        tick = self.begin
        try:
            while tick <= self.end:
                _sleep_until(tick)
                at = clock() - self.begin
                row = dict(conn.execute(queries.get("run_api_sessions"), APP_NAMES).fetchone())
                row.update(conn.execute(queries.get("run_silence")).fetchone())
                found.samples.append({"t": round(at, 2), **row})
                if clock() >= next_reap or tick + 1.0 > self.end:
                    self._reap_check(at)
                    next_reap += REAP_EVERY
                tick += 1.0
            if self._api is not None:
                found.server_cpu = self._api.cpu_seconds() - cpu_at_begin
            found.advanced = dict(
                conn.execute(queries.get("beat_since"), {"since": since}).fetchone()
            )
        except Exception as error:  # reported, not swallowed: the report says so
            found.errors.append(f"{type(error).__name__}: {error}")
        finally:
            conn.close()

    def _reap_check(self, at: float) -> None:
        conn = self._conn
        with conn.transaction(force_rollback=True):
            now = db_clock.now(conn)
            result = reap.run_once(conn, now=now)
        counts = {signature: len(ids) for signature, ids in result.run_ids.items() if ids}
        self.found.reap_checks.append({"t": round(at, 2), **counts})
        for signature, ids in result.run_ids.items():
            self.found.would_reap.setdefault(signature, set()).update(ids)


def _sleep_until(at: float) -> None:
    left = at - clock()
    if left > 0:
        time.sleep(left)


# -- the two designs ----------------------------------------------------------------------


@dataclass
class Arm:
    runs: list[RunRef]
    records: list[Record]
    watched: Watched
    begin: float  # the window, relative to the pods' start
    end: float
    extra: dict[str, Any] = field(default_factory=dict)

    def beats(self) -> list[tuple[float, float, str]]:
        return [beat for record in self.records for beat in record.beats]

    def window_beats(self, start_at: float) -> list[tuple[float, float, str]]:
        begin, end = start_at + self.begin, start_at + self.end
        return [beat for beat in self.beats() if begin <= beat[0] < end]


def _split(runs: list[RunRef], parts: int) -> list[list[tuple[int, str]]]:
    return [[(run.run_id, run.token) for run in runs[i::parts]] for i in range(parts)]


def measure_run_api(env: Environment, size: Size, work: Path) -> Arm:
    dsn = env.create_database("runapi")
    runs = runapi_pods.running_runs(dsn, size.runs, NAMESPACES, heartbeat=HEARTBEAT)
    api = RunApiProcess(
        dsn,
        work,
        rate=RATE,
        burst=BURST,
        concurrency=CONCURRENCY,
        waiters=WAITERS,
        pool_size=POOL_SIZE,
    ).start()
    warmup = INTERVAL + 1.0
    tasks = [
        ApiPods(api.url, api.ca, part, INTERVAL, warmup + size.seconds, seed=i)
        for i, part in enumerate(_split(runs, size.processes))
    ]
    watch = Watch(dsn, api)
    started: list[float] = []

    def on_start(start_at: float) -> None:
        started.append(start_at)
        watch.arm(start_at + warmup, start_at + warmup + size.seconds)

    try:
        records = Fleet().run(tasks, timeout=warmup + size.seconds + 120, on_start=on_start)
        watch.join(timeout=60)
        api.check_alive()
        threads_cpu = api.threads_cpu()
    finally:
        api.stop()
    log = api.log_tail(40)
    arm = Arm(runs, records, watch.found, warmup, warmup + size.seconds)
    arm.extra = {"start_at": started[0], "threads_cpu": threads_cpu, "server_log": log}
    return arm


def measure_sessions(env: Environment, size: Size) -> Arm:
    dsn = env.create_database("sessions")
    runs = runapi_pods.running_runs(dsn, size.runs, NAMESPACES, heartbeat=HEARTBEAT)
    user = f"bench_job_{uuid.uuid4().hex[:8]}"
    with connection.connect(dsn, application_name="pgsched-bench-setup") as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgsched_job").format(sql.Identifier(user))
        )
        admin.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(admin.info.dbname), sql.Identifier(user)
            )
        )
    job_dsn = dsn.replace("user=postgres", f"user={user}")
    # The window starts with the pods: whatever they get, they get in the first seconds.
    tasks = [
        SessionPods(job_dsn, part, INTERVAL, size.baseline_seconds, seed=i)
        for i, part in enumerate(_split(runs, size.processes))
    ]
    watch = Watch(dsn)
    started: list[float] = []

    def on_start(start_at: float) -> None:
        started.append(start_at)
        watch.arm(start_at + INTERVAL, start_at + size.baseline_seconds)

    records = Fleet().run(tasks, timeout=size.baseline_seconds + 120, on_start=on_start)
    watch.join(timeout=60)
    arm = Arm(runs, records, watch.found, INTERVAL, size.baseline_seconds)
    arm.extra = {"start_at": started[0]}
    return arm


# -- the report ---------------------------------------------------------------------------


def _would_reap(arm: Arm) -> set[int]:
    found = arm.watched.would_reap
    return found.get("heartbeat_lost", set()) | found.get("orphaned", set())


def _max(arm: Arm, column: str) -> float:
    values = [sample[column] for sample in arm.watched.samples if sample[column] is not None]
    return max(values) if values else math.nan


def report(ctx: Context, size: Size, api: Arm, sessions: Arm) -> Report:
    result = Report(
        NAME,
        TITLE,
        columns=["measure", "run API", "session per pod", "ratio"],
    )
    api_beats = api.window_beats(api.extra["start_at"])
    api_ok = [seconds * 1000 for _, seconds, outcome in api_beats if outcome == "ok"]
    api_outcomes = Counter(outcome for _, _, outcome in api_beats)
    polls = [poll for record in api.records for poll in record.polls]
    poll_outcomes = Counter(outcome for _, _, outcome in polls)
    base_beats = sessions.beats()
    base_ok = [seconds * 1000 for _, seconds, outcome in base_beats if outcome == "ok"]
    base_outcomes = Counter(outcome for _, _, outcome in base_beats)
    connected = sum(int(record.notes[0].split()[1]) for record in sessions.records)
    api_reaped, base_reaped = len(_would_reap(api)), len(_would_reap(sessions))
    api_alive, base_alive = size.runs - api_reaped, size.runs - base_reaped
    never_ok_api = size.runs - len({r for rec in api.records for r in rec.first_ok})
    never_ok_base = size.runs - len({r for rec in sessions.records for r in rec.first_ok})
    result.add(
        measure=f"runs kept alive (of {size.runs}): not reaped in any check",
        **{"run API": api_alive, "session per pod": base_alive},
        ratio=ratio(api_alive, base_alive),
    )
    result.add(
        measure="runs the reaper would end (HeartbeatLost / Orphaned, any check)",
        **{
            "run API": api_reaped,
            "session per pod": base_reaped,
            "ratio": "-",
        },
    )
    result.add(
        measure="runs that never got a beat answered",
        **{"run API": never_ok_api, "session per pod": never_ok_base, "ratio": "-"},
    )
    result.add(
        measure="runs' longest silence seen (s; timeout 15)",
        **{
            "run API": _max(api, "longest_silence"),
            "session per pod": _max(sessions, "longest_silence"),
            "ratio": "-",
        },
    )
    result.add(
        measure="heartbeat round trip p50 / p99 (ms)",
        **{
            "run API": f"{median(api_ok):.1f} / {percentile(api_ok, 0.99):.1f}",
            "session per pod": f"{median(base_ok):.1f} / {percentile(base_ok, 0.99):.1f}",
            "ratio": ratio(percentile(api_ok, 0.99), percentile(base_ok, 0.99)),
        },
    )
    result.add(
        measure="beats answered in the window",
        **{
            "run API": len(api_ok),
            "session per pod": len(base_ok),
            "ratio": ratio(len(api_ok), len(base_ok)),
        },
    )
    result.add(
        measure="pods that got a database session",
        **{"run API": 0, "session per pod": connected, "ratio": "-"},
    )
    result.add(
        measure="connection attempts refused: too many clients",
        **{
            "run API": 0,
            "session per pod": base_outcomes.get("too many clients", 0),
            "ratio": "-",
        },
    )
    result.add(
        measure="sessions, max: run API (pool / stops / presence) vs pods' own",
        **{
            "run API": f"{_max(api, 'run_api'):.0f} ({_max(api, 'pool'):.0f} /"
            f" {_max(api, 'stops'):.0f} / {_max(api, 'presence'):.0f})",
            "session per pod": f"{_max(sessions, 'sidecars'):.0f}",
            "ratio": ratio(_max(api, "run_api"), _max(sessions, "sidecars")),
        },
    )
    result.add(
        measure="client backends, max (all, with the benchmark's own)",
        **{
            "run API": _max(api, "client_backends"),
            "session per pod": _max(sessions, "client_backends"),
            "ratio": "-",
        },
    )
    window = api.end - api.begin
    result.add(
        measure="run API process CPU over the window (cores)",
        **{
            "run API": api.watched.server_cpu / window,
            "session per pod": "-",
            "ratio": "-",
        },
    )
    pods_cpu = sum(record.cpu_seconds for record in api.records)
    base_cpu = sum(record.cpu_seconds for record in sessions.records)
    result.add(
        measure="pod processes' CPU (cores, whole run of the pods)",
        **{
            "run API": pods_cpu / (api.end + 0.0),
            "session per pod": base_cpu / sessions.end,
            "ratio": "-",
        },
    )
    result.floor("runs the reaper would end, run API", api_reaped, 0, higher_is_better=False)
    result.floor(
        f"run API pool sessions, max (pool size {POOL_SIZE})",
        _max(api, "pool"),
        POOL_SIZE,
        higher_is_better=False,
    )
    result.floor(
        "run API sessions, max: pool + stops listener + presence stamps",
        _max(api, "run_api"),
        POOL_SIZE + 2,
        higher_is_better=False,
    )
    beats_per_namespace = size.runs / len(NAMESPACES) * 2 / INTERVAL
    result.notes.append(
        f"{size.runs} runs in {len(NAMESPACES)} namespaces, {size.processes} pod processes;"
        f" beat every {INTERVAL:g} s with the cancel long poll between beats; run API"
        f" window {window:g} s after a {api.begin:g} s warm-up, baseline window"
        f" {sessions.begin:g}-{sessions.end:g} s of its pods' start; max_connections"
        f" {MAX_CONNECTIONS}"
    )
    result.notes.append(
        f"run API limits per namespace: rate {RATE:g}/s (burst {BURST}), {CONCURRENCY}"
        f" database calls in flight, {WAITERS} long polls; pool {POOL_SIZE}. The operator's"
        f" default rate, {DEFAULT_RATE:g}/s, is below these pods' {beats_per_namespace:g}"
        " requests a second per namespace (a beat and a long poll per run per interval):"
        f" at it a namespace carries ~{DEFAULT_RATE * INTERVAL / 2:.0f} runs beating every"
        f" {INTERVAL:g} s"
    )
    result.notes.append(
        "run API beats by outcome: "
        + ", ".join(f"{k} {v}" for k, v in sorted(api_outcomes.items()))
        + "; long polls: "
        + ", ".join(f"{k} {v}" for k, v in sorted(poll_outcomes.items()))
    )
    result.notes.append(
        "session-per-pod attempts by outcome: "
        + ", ".join(f"{k} {v}" for k, v in sorted(base_outcomes.items()))
    )
    for arm_name, arm in (("run API", api), ("session per pod", sessions)):
        if arm.watched.errors:
            result.notes.append(f"{arm_name}: the watch failed: {arm.watched.errors}")
        errors = [note for record in arm.records for note in record.notes[1:]]
        if errors:
            result.notes.append(f"{arm_name}: pod errors (first): {errors[:3]}")
    result.data = {
        "size": size.__dict__,
        "run_api": _arm_data(api),
        "sessions": _arm_data(sessions),
        "run_api_beats_by_outcome": dict(api_outcomes),
        "run_api_polls_by_outcome": dict(poll_outcomes),
        "sessions_by_outcome": dict(base_outcomes),
        "sessions_connected": connected,
        "run_api_threads_cpu": api.extra["threads_cpu"],
        "run_api_server_log_tail": api.extra["server_log"],
        "latency_ms": {
            "run_api_p50": median(api_ok),
            "run_api_p99": percentile(api_ok, 0.99),
            "sessions_p50": median(base_ok),
            "sessions_p99": percentile(base_ok, 0.99),
        },
    }
    if ctx.plots:
        result.plots.append(plot(ctx, api, sessions))
    return result


def _arm_data(arm: Arm) -> dict[str, Any]:
    return {
        "samples": arm.watched.samples,
        "reap_checks": arm.watched.reap_checks,
        "would_reap": {k: len(v) for k, v in arm.watched.would_reap.items()},
        "advanced_in_window": arm.watched.advanced,
        "server_cpu_seconds": arm.watched.server_cpu,
        "late_start_max": max((record.late_start for record in arm.records), default=0.0),
    }


def plot(ctx: Context, api: Arm, sessions: Arm) -> str:
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5))
    for arm, label, column, style in (
        (api, "run API: its sessions", "run_api", "-"),
        (api, "run API arm: all client backends", "client_backends", ":"),
        (sessions, "session per pod: pods' sessions", "sidecars", "-"),
        (sessions, "session per pod: all client backends", "client_backends", ":"),
    ):
        samples = arm.watched.samples
        top.plot(
            [s["t"] for s in samples], [s[column] for s in samples], style, label=label, marker="."
        )
    top.axhline(MAX_CONNECTIONS, color="red", linewidth=1, label="max_connections")
    top.set_xlabel("seconds into the window")
    top.set_ylabel("sessions")
    top.set_title(f"{len(api.runs):,} RUNNING runs, one PostgreSQL with max_connections 50")
    top.legend(fontsize=7)
    top.grid(True, alpha=0.3)
    for arm, label in ((api, "run API"), (sessions, "session per pod")):
        samples = arm.watched.samples
        alive = [len(arm.runs) - (s["past_timeout"] or 0) - (s["never_beat"] or 0) for s in samples]
        bottom.plot([s["t"] for s in samples], alive, label=f"{label}: runs within their timeout")
    bottom.set_xlabel("seconds into the window")
    bottom.set_ylabel("runs")
    bottom.set_ylim(bottom=0)
    bottom.legend(fontsize=7)
    bottom.grid(True, alpha=0.3)
    return save_plot(fig, ctx.out_dir, NAME)
