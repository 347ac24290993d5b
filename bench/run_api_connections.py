"""2,000 RUNNING runs on one PostgreSQL with ``max_connections = 50``: the run API vs a
database session per pod.

One throwaway server started with ``max_connections = 50`` (3 of them reserved for
superusers, as by default), a database per arm on it, each with the same 2,000 RUNNING
runs in four namespaces, made by the engine's own functions (``runs.run_now`` and
``dispatch.run_once``), every definition with ``heartbeat: {intervalSeconds: 5,
timeoutSeconds: 15, orphanTimeoutSeconds: 15}``. The runs' ``started_at`` is moved to
their pods' start (making them and starting 25 processes takes longer than a pod's start).

- **run API** (the new design): the real server (``pgsched.runapi.serving.Serving``, pool
  size 4, the operator's default limits but for the rate: see ``RATE``) in a process of its
  own (``bench.runapi_server``); 25 pod processes each drive 80 runs' heartbeat loops, a
  thread and a keep-alive HTTPS connection per run: a beat every 5 s and the cancel long
  poll between beats, as the in-pod sidecar does. The first beat of each run falls at a
  random instant of its first interval, as after an operator restart; the window starts
  one interval later.
- **session per pod** (today's design, the baseline, same server, same run): the same
  2,000 runs' pods each try to hold a session of their own as a ``pgsched_job`` login,
  beat with ``pgsched.engine.lease.heartbeat`` and LISTEN between beats; a pod whose
  connection failed tries again a second later, as the heartbeat loop does.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psycopg import sql

from bench import queries, runapi_pods
from bench.context import Context
from bench.environment import Environment
from bench.report import Report, pyplot, save_plot
from bench.runapi_pods import ApiPods, Fleet, Record, RunRef, SessionPods, clock
from bench.runapi_server import DESTROYED, RunApiProcess
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
PODS_NICE = 0  # the run API pods' niceness (scratch runs: pods that yield to the server)
RAMP = 0.0  # seconds over which the pods' first beats spread (at least one interval)
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
QUICK = Size(runs=100, processes=4, seconds=20.0, baseline_seconds=16.0)


def run(ctx: Context) -> Report:
    size = QUICK if ctx.quick else FULL
    if ctx.minutes:
        size = replace(size, seconds=ctx.minutes * 60)
    server = PostgresServer(settings={"max_connections": str(MAX_CONNECTIONS)}).start()
    env = Environment(server)
    try:
        with tempfile.TemporaryDirectory(prefix="pgsched-bench-runapi-") as work:
            arms = [measure_run_api(env, size, Path(work)), measure_sessions(env, size)]
    finally:
        server.cleanup()
    return report(ctx, size, arms)


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


# -- the designs --------------------------------------------------------------------------


@dataclass
class Arm:
    label: str
    runs: list[RunRef]
    records: list[Record]
    watched: Watched
    start_at: float
    begin: float  # the window, in seconds after the pods' start
    end: float
    threads_cpu: dict[str, float] = field(default_factory=dict)
    server_log: str = ""
    destroyed: int = 0  # requests the server's stop left pending (logged as ERRORs)

    @property
    def api(self) -> bool:
        return self.label != SESSIONS

    def window_beats(self) -> list[tuple[float, float, str]]:
        begin, end = self.start_at + self.begin, self.start_at + self.end
        return [b for record in self.records for b in record.beats if begin <= b[0] < end]

    def polls(self) -> list[tuple[float, float, str]]:
        begin, end = self.start_at + self.begin, self.start_at + self.end
        return [p for record in self.records for p in record.polls if begin <= p[0] < end]

    def would_reap(self) -> set[int]:
        found = self.watched.would_reap
        return found.get("heartbeat_lost", set()) | found.get("orphaned", set())

    def most(self, column: str) -> float:
        values = [s[column] for s in self.watched.samples if s[column] is not None]
        return max(values) if values else math.nan


RUN_API = "run API"
SESSIONS = "session per pod"
RATIO = f"{RUN_API} / {SESSIONS}"


def _split(runs: list[RunRef], parts: int) -> list[list[tuple[int, str]]]:
    return [[(run.run_id, run.token) for run in runs[i::parts]] for i in range(parts)]


class Start:
    """What happens at the pods' common start: the runs start with them (their
    ``started_at``, which orphanTimeoutSeconds counts from), and the watch is armed."""

    def __init__(self, dsn: str, watch: Watch, begin: float, end: float) -> None:
        self._dsn, self._watch, self._begin, self._end = dsn, watch, begin, end
        self.at = math.nan

    def __call__(self, start_at: float) -> None:
        with connection.connect(self._dsn, application_name="pgsched-bench-setup") as conn:
            conn.execute(queries.get("pods_start_now"))
        self._watch.arm(start_at + self._begin, start_at + self._end)
        self.at = start_at


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
    warmup = max(INTERVAL, RAMP) + 1.0
    seconds = size.seconds
    tasks = [
        ApiPods(
            api.url, api.ca, part, INTERVAL, warmup + seconds, seed=i, ramp=RAMP, nice=PODS_NICE
        )
        for i, part in enumerate(_split(runs, size.processes))
    ]
    watch = Watch(dsn, api)
    on_start = Start(dsn, watch, warmup, warmup + seconds)
    try:
        records = Fleet().run(tasks, timeout=warmup + seconds + 120, on_start=on_start)
        watch.join(timeout=60)
        api.check_alive()
        threads_cpu = api.threads_cpu()
    finally:
        destroyed = api.stop_and_count()
    return Arm(
        RUN_API,
        runs,
        records,
        watch.found,
        on_start.at,
        warmup,
        warmup + seconds,
        threads_cpu,
        api.log_tail(40),
        destroyed,
    )


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
    tasks = [
        SessionPods(job_dsn, part, INTERVAL, size.baseline_seconds, seed=i)
        for i, part in enumerate(_split(runs, size.processes))
    ]
    watch = Watch(dsn)
    # The window starts one interval in: which pods got a session is settled by then.
    on_start = Start(dsn, watch, INTERVAL, size.baseline_seconds)
    records = Fleet().run(tasks, timeout=size.baseline_seconds + 120, on_start=on_start)
    watch.join(timeout=60)
    return Arm(SESSIONS, runs, records, watch.found, on_start.at, INTERVAL, size.baseline_seconds)


# -- the report ---------------------------------------------------------------------------


def _ms(beats: list[tuple[float, float, str]]) -> list[float]:
    return [seconds * 1000 for _, seconds, outcome in beats if outcome == "ok"]


def _outcomes(beats: list[tuple[float, float, str]]) -> str:
    counts = Counter(outcome for _, _, outcome in beats)
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def report(ctx: Context, size: Size, arms: list[Arm]) -> Report:
    labels = [arm.label for arm in arms]
    result = Report(NAME, TITLE, columns=["measure", *labels, RATIO])
    new, old = arms[0], arms[-1]

    def row(measure: str, values: list[Any], ratio_of: float | str = "-") -> None:
        result.add(measure=measure, **dict(zip(labels, values, strict=True)), **{RATIO: ratio_of})

    reaped = [len(arm.would_reap()) for arm in arms]
    alive = [size.runs - count for count in reaped]
    row(
        f"runs kept alive (of {size.runs:,}): none of the reaper's checks would end them",
        alive,
        ratio(alive[0], alive[-1]),
    )
    row("runs the reaper would end (HeartbeatLost / Orphaned, any check)", reaped)
    never = [size.runs - len({r for rec in arm.records for r in rec.first_ok}) for arm in arms]
    row("runs whose pod never had a beat answered", never)
    row("runs' longest silence seen (s; timeout 15)", [arm.most("longest_silence") for arm in arms])
    latencies = [_ms(arm.window_beats()) for arm in arms]
    row(
        "heartbeat round trip p50 / p99 (ms)",
        [f"{median(ms):.1f} / {percentile(ms, 0.99):.1f}" for ms in latencies],
        ratio(percentile(latencies[0], 0.99), percentile(latencies[-1], 0.99)),
    )
    window = [arm.end - arm.begin for arm in arms]
    answered = [len(ms) / seconds for ms, seconds in zip(latencies, window, strict=True)]
    row("beats answered a second in the window", answered, ratio(answered[0], answered[-1]))
    refused = [
        sum(1 for *_, o in arm.window_beats() if o.startswith("429")) / seconds
        for arm, seconds in zip(arms, window, strict=True)
    ]
    row("beats refused 429 a second (run API: the exact errors in notes)", refused)
    connected = [sum(record.connected for record in arm.records) for arm in arms]
    row("pods that got a database session of their own", connected)
    too_many = [
        sum(1 for rec in arm.records for *_, o in rec.beats if o == "too many clients")
        for arm in arms
    ]
    row("connection attempts refused for want of a slot (exact error in notes)", too_many)
    row(
        "sessions, max: the run API's (pool / stops / presence) or the pods' own",
        [
            f"{arm.most('run_api'):.0f} ({arm.most('pool'):.0f} / {arm.most('stops'):.0f} /"
            f" {arm.most('presence'):.0f})"
            if arm.api
            else f"{arm.most('sidecars'):.0f}"
            for arm in arms
        ],
        ratio(new.most("run_api"), old.most("sidecars")),
    )
    row(
        "client backends, max (all, with the benchmark's 1-2)",
        [arm.most("client_backends") for arm in arms],
    )
    row(
        "run API process CPU in the window (cores)",
        [
            arm.watched.server_cpu / seconds if arm.api else "-"
            for arm, seconds in zip(arms, window, strict=True)
        ],
    )
    row(
        "pod processes' CPU, whole run (cores)",
        [sum(record.cpu_seconds for record in arm.records) / arm.end for arm in arms],
    )
    result.floor(f"runs the reaper would end, {new.label}", reaped[0], 0, higher_is_better=False)
    result.floor(
        f"{new.label}: pool sessions, max (pool size {POOL_SIZE})",
        new.most("pool"),
        POOL_SIZE,
        higher_is_better=False,
    )
    result.floor(
        f"{new.label}: sessions, max (pool + stops listener + presence stamps)",
        new.most("run_api"),
        POOL_SIZE + 2,
        higher_is_better=False,
    )
    per_namespace = size.runs / len(NAMESPACES) * 2 / INTERVAL
    result.notes.append(
        f"{size.runs:,} runs in {len(NAMESPACES)} namespaces, {size.processes} pod processes;"
        f" a beat every {INTERVAL:g} s and the cancel long poll between beats; run API"
        f" windows of {window[0]:g} s after a {new.begin:g} s warm-up (first beats spread"
        f" over {max(INTERVAL, RAMP):g} s); the baseline's window {old.begin:g}-{old.end:g} s"
        f" after its pods' start; max_connections {MAX_CONNECTIONS}"
    )
    result.notes.append(
        f"run API limits per namespace: rate {RATE:g}/s (burst {BURST}), {CONCURRENCY}"
        f" database calls in flight, {WAITERS} long"
        f" polls; pool {POOL_SIZE}. The operator's default rate, {DEFAULT_RATE:g}/s, is"
        f" below these pods' {per_namespace:g} requests a second per namespace (a beat and a"
        f" long poll per run per interval): at it a namespace carries"
        f" ~{DEFAULT_RATE * INTERVAL / 2:.0f} runs beating every {INTERVAL:g} s"
    )
    for arm in arms:
        result.notes.append(f"{arm.label}: beats {_outcomes(arm.window_beats())}")
        if arm.api:
            result.notes.append(f"{arm.label}: long polls {_outcomes(arm.polls())}")
        errors = _errors(arm).most_common(3)
        if errors:
            result.notes.append(
                f"{arm.label}: errors, most frequent first: "
                + "; ".join(f"{count} x {text!r}" for text, count in errors)
            )
        if arm.watched.errors:
            result.notes.append(f"{arm.label}: the watch failed: {arm.watched.errors}")
        if arm.destroyed:
            result.notes.append(
                f"{arm.label}: stopping the server (Serving.stop) with the pods' long polls"
                f" open logged {arm.destroyed} x ERROR '{DESTROYED}' (an aiohttp request"
                " task each)"
            )
    result.data = {
        "size": size.__dict__,
        "summary": {
            arm.label: {
                "alive": alive[i],
                "would_reap": reaped[i],
                "p50_ms": median(latencies[i]),
                "p99_ms": percentile(latencies[i], 0.99),
                "beats_per_second": answered[i],
                "refused_429_per_second": refused[i],
                "sessions_max": arm.most("run_api" if arm.api else "sidecars"),
                "pool_max": arm.most("pool"),
                "connected": connected[i],
                "too_many_clients": too_many[i],
            }
            for i, arm in enumerate(arms)
        },
        "arms": {arm.label: _arm_data(arm) for arm in arms},
        "latency_ms": {
            arm.label: {"p50": median(ms), "p99": percentile(ms, 0.99)}
            for arm, ms in zip(arms, latencies, strict=True)
        },
    }
    if ctx.plots:
        result.plots.append(plot(ctx, arms))
    return result


def _errors(arm: Arm) -> Counter[str]:
    found: Counter[str] = Counter()
    for record in arm.records:
        found.update(record.errors)
    return found


def _arm_data(arm: Arm) -> dict[str, Any]:
    return {
        "window": [arm.begin, arm.end],
        "samples": arm.watched.samples,
        "reap_checks": arm.watched.reap_checks,
        "would_reap": {k: len(v) for k, v in arm.watched.would_reap.items()},
        "advanced_in_window": arm.watched.advanced,
        "server_cpu_seconds": arm.watched.server_cpu,
        "threads_cpu_seconds": arm.threads_cpu,
        "late_start_max": max((record.late_start for record in arm.records), default=0.0),
        "errors": dict(_errors(arm).most_common(20)),
        "server_log_tail": arm.server_log,
        "pending_at_stop": arm.destroyed,
    }


def plot(ctx: Context, arms: list[Arm]) -> str:
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5))
    for arm in arms:
        samples = arm.watched.samples
        column = "run_api" if arm.api else "sidecars"
        what = "its sessions" if arm.api else "the pods' sessions"
        top.plot(
            [s["t"] for s in samples], [s[column] for s in samples], label=f"{arm.label}: {what}"
        )
        alive = [len(arm.runs) - (s["past_timeout"] or 0) - (s["never_beat"] or 0) for s in samples]
        bottom.plot([s["t"] for s in samples], alive, label=f"{arm.label}")
    top.axhline(MAX_CONNECTIONS, color="red", linewidth=1, label="max_connections")
    top.set_ylabel("sessions")
    top.set_title(f"{len(arms[0].runs):,} RUNNING runs, one PostgreSQL with max_connections 50")
    bottom.set_ylabel("runs heard from within their timeout")
    bottom.set_ylim(bottom=0)
    for axis in (top, bottom):
        axis.set_xlabel("seconds into the window")
        axis.legend(fontsize=7)
        axis.grid(True, alpha=0.3)
    return save_plot(fig, ctx.out_dir, NAME)
