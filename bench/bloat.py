"""History and bloat: claiming while an old snapshot pins dead rows.

A steady, paced workload runs against a table holding 1,000,000 finished runs: ten times
a second, 25 runs are queued (materialization's stand-in), ``dispatch.run_once`` claims
25 (timed — the backlog of 2,000 due runs stays level), the job side finishes each with
``lease.finish``, and ``settle.run_once`` settles them. Every run leaves four row versions
behind, as in production. Phases:

1. baseline (30 s);
2. a session opens a REPEATABLE READ transaction, reads, and keeps it open
   (``--snapshot-seconds``, default 180 s): nothing that dies after its snapshot can be
   cleaned up — not by autovacuum, not by index hint bits;
3. the snapshot is released and the workload goes on with **autovacuum only** (default
   settings) for up to 120 s; if dead tuples are not back by then, a manual ``VACUUM``
   is run and timed, and the workload runs 10 s more.

Sampled every second: dead/live tuples (``pg_stat_user_tables``), heap and index sizes,
the oldest snapshot's xmin age, and the buffers the dispatcher's candidate query touches
(``EXPLAIN (ANALYZE, BUFFERS)``, rolled back); every claim's latency and the CPU the
claims used (driver process + its backend). Buffers and CPU per claim do not depend on
what else the machine is doing; wall-clock latency on a shared machine does, so all three
are reported. Ratios are to the baseline phase of the same run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from bench import queries, seed
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.stats import median, percentile, ratio
from bench.workers import backend_cpu
from pgsched.db import connection
from pgsched.db import queries as engine_queries
from pgsched.engine import dispatch, launcher, lease, settle

NAME = "bloat"
TITLE = "claim latency, dead tuples and size under a long-held snapshot"
DEFINITIONS = 1_000
BACKLOG = 2_000
TICK = 0.1  # seconds between workload ticks
PER_TICK = 25  # runs queued and claimed per tick: 250 runs/s
LATENCY_RECOVERED = 1.5  # rolling p50 within this factor of the baseline p50


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    claims: list[tuple[float, float, str]] = field(default_factory=list)  # t, ms, phase
    claim_cpu: dict[str, list[float]] = field(default_factory=dict)  # phase -> CPU s per claim
    settles: list[tuple[float, float, str]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def mark(self, what: str) -> None:
        self.events.append((self.now(), what))
        print(f"  {self.now():7.1f}s  {what}", flush=True)

    def claim_ms(self, phase: str, *, last: int | None = None) -> list[float]:
        values = [ms for _, ms, p in self.claims if p == phase]
        return values[-last:] if last else values


def run(ctx: Context) -> Report:
    history = 20_000 if ctx.quick else 1_000_000
    baseline_s, recovery_s, after_vacuum_s = (1.5, 2.0, 1.0) if ctx.quick else (30.0, 120.0, 10.0)
    hold_s = ctx.snapshot_seconds
    dsn = ctx.env.create_database("bloat")
    line = Timeline()
    try:
        with connection.connect(dsn) as conn, connection.connect(dsn) as holder:
            seed.definitions(conn, count=DEFINITIONS, cap=5, due=False)
            seed.history(conn, history)
            seed.queued(conn, BACKLOG)
            conn.execute(queries.get("vacuum_analyze_runs"))
            line = Timeline()
            work = _Workload(conn, line)
            work.drive(baseline_s, "baseline")
            holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with holder.transaction():
                holder.execute(queries.get("snapshot_read"))
                line.mark("snapshot taken")
                work.drive(hold_s, "snapshot held")
            line.mark("snapshot released")
            released = line.now()
            base_dead = max(s["dead_tuples"] for s in line.stats if s["phase"] == "baseline")
            recovered = work.drive(
                recovery_s, "after release", until=lambda: _dead_cleared(line, base_dead)
            )
            latency_back = _latency_recovered_at(line, released)
            vacuum_seconds = None
            if not recovered:
                line.mark("dead tuples not cleared by autovacuum: manual VACUUM")
                started = time.monotonic()
                conn.execute(queries.get("vacuum_runs"))
                vacuum_seconds = time.monotonic() - started
                line.mark(f"VACUUM done in {vacuum_seconds:.1f}s")
                work.drive(after_vacuum_s, "after VACUUM")
            dead_back = _dead_cleared_at(line, base_dead, released)
    finally:
        ctx.env.drop_databases()

    report = _report(ctx, line, hold_s=hold_s, history=history)
    report.data.update(
        {
            "released_at_s": released,
            "latency_recovered_after_s": None if latency_back is None else latency_back - released,
            "dead_tuples_cleared_after_s": None if dead_back is None else dead_back - released,
            "cleared_by": "autovacuum" if recovered else "manual VACUUM",
            "manual_vacuum_seconds": vacuum_seconds,
        }
    )
    report.notes.append(
        f"{history:,} finished runs retained, {DEFINITIONS} definitions, backlog {BACKLOG}, "
        f"{PER_TICK / TICK:.0f} runs/s offered; snapshot held {hold_s:g}s; claim latency back "
        f"within {LATENCY_RECOVERED}x baseline p50 "
        + _after(report.data["latency_recovered_after_s"])
        + "; dead tuples back to the baseline level "
        + _after(report.data["dead_tuples_cleared_after_s"])
        + f" (by {report.data['cleared_by']}"
        + (f", which took {vacuum_seconds:.1f}s)" if vacuum_seconds is not None else ")")
    )
    return report


class _Workload:
    """The paced tick: queue, claim (timed), finish, settle; stats once a second."""

    def __init__(self, conn: connection.Connection, line: Timeline) -> None:
        self.conn = conn
        self.line = line
        self.null = launcher.NullLauncher()
        self.next_stats = 0.0
        self.backend = conn.info.backend_pid

    def drive(self, seconds: float, phase: str, *, until: Any = None) -> bool:
        """Run ``seconds`` (or until ``until()`` is true: returns True then)."""
        self.line.mark(phase)
        self.line.claim_cpu.setdefault(phase, [])
        end = time.monotonic() + seconds
        next_tick = time.monotonic()
        while time.monotonic() < end:
            self._tick(phase)
            if self.line.now() >= self.next_stats:
                self._observe(phase)
                self.next_stats = self.line.now() + 1.0
                if until is not None and until():
                    return True
            next_tick += TICK
            time.sleep(max(0.0, next_tick - time.monotonic()))
        return False

    def _tick(self, phase: str) -> None:
        seed.queued(self.conn, PER_TICK)
        cpu = time.process_time() + backend_cpu(self.backend)
        started = time.perf_counter()
        result = dispatch.run_once(self.conn, self.null, batch_size=PER_TICK)
        self.line.claims.append((self.line.now(), (time.perf_counter() - started) * 1000, phase))
        # /proc counts CPU in 10 ms ticks: one claim's share is coarse, their sum is not.
        self.line.claim_cpu[phase].append(time.process_time() + backend_cpu(self.backend) - cpu)
        for run in result.claimed:
            assert run.lease_token is not None
            lease.finish(self.conn, lease.Lease(run.id, run.lease_token), "COMPLETED")
        started = time.perf_counter()
        settle.run_once(self.conn)
        self.line.settles.append((self.line.now(), (time.perf_counter() - started) * 1000, phase))

    def _observe(self, phase: str) -> None:
        row = self.conn.execute(queries.get("table_stats")).fetchone()
        xmin = self.conn.execute(queries.get("oldest_xmin_age")).fetchone()
        assert row is not None and xmin is not None
        sample = {"t": self.line.now(), "phase": phase, **row, **xmin, **self._candidate_work()}
        self.line.stats.append(sample)

    def _candidate_work(self) -> dict[str, float]:
        """Buffers and server time of the dispatcher's candidate query, right now."""
        query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}").format(
            engine_queries.get("claim_candidates")
        )
        with self.conn.transaction(force_rollback=True):
            row = self.conn.execute(
                query,
                {
                    "now": None,
                    "limit": PER_TICK * dispatch.DEFAULT_OVERSHOOT,
                    "definition_ids": None,
                },
            ).fetchone()
        assert row is not None
        plan = row["QUERY PLAN"][0]
        top = plan["Plan"]
        return {
            "candidate_buffers": top["Shared Hit Blocks"] + top["Shared Read Blocks"],
            "candidate_ms": plan["Execution Time"],
        }


def _dead_cleared(line: Timeline, base_dead: int) -> bool:
    return line.stats[-1]["dead_tuples"] <= max(1_000, 1.5 * base_dead)


def _dead_cleared_at(line: Timeline, base_dead: int, since: float) -> float | None:
    for sample in line.stats:
        if sample["t"] > since and sample["dead_tuples"] <= max(1_000, 1.5 * base_dead):
            return float(sample["t"])
    return None


def _latency_recovered_at(line: Timeline, since: float) -> float | None:
    base = percentile(line.claim_ms("baseline"), 0.5)
    after = [(t, ms) for t, ms, _ in line.claims if t > since]
    for index in range(len(after)):
        window = [ms for _, ms in after[max(0, index - 9) : index + 1]]
        if len(window) == 10 and percentile(window, 0.5) <= LATENCY_RECOVERED * base:
            return after[index][0]
    return None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _after(seconds: float | None) -> str:
    return "not observed" if seconds is None else f"{seconds:.1f}s after release"


def _report(ctx: Context, line: Timeline, *, hold_s: float, history: int) -> Report:
    report = Report(
        NAME,
        TITLE,
        columns=[
            "phase",
            "claims",
            "runs/s",
            "claim p50 ms",
            "claim p99 ms",
            "p50 ratio",
            "p99 ratio",
            "claim CPU ms",
            "CPU ratio",
            "candidate buffers",
            "buffers ratio",
            "settle p50 ms",
            "dead tuples (end)",
            "heap MB (end)",
            "queued index kB (end)",
        ],
    )
    base = line.claim_ms("baseline")
    held = line.claim_ms("snapshot held")
    phases: list[tuple[str, list[float], str]] = [
        ("baseline", base, "baseline"),
        ("snapshot held", held, "snapshot held"),
        ("snapshot held, last 10%", held[-max(1, len(held) // 10) :], "snapshot held"),
        ("after release", line.claim_ms("after release"), "after release"),
        ("after VACUUM", line.claim_ms("after VACUUM"), "after VACUUM"),
    ]
    base_cpu = _mean(line.claim_cpu["baseline"]) * 1000
    base_buffers = median([s["candidate_buffers"] for s in line.stats if s["phase"] == "baseline"])
    for label, values, phase in phases:
        if not values:
            continue
        samples = [s for s in line.stats if s["phase"] == phase]
        if label.endswith("last 10%"):
            samples = samples[-max(1, len(samples) // 10) :]
        end = samples[-1:]
        settles = [ms for _, ms, p in line.settles if p == phase]
        times = [t for t, _, p in line.claims if p == phase]
        cpu = _mean(line.claim_cpu.get(phase, [])) * 1000
        buffers = median([s["candidate_buffers"] for s in samples])
        report.add(
            phase=label,
            claims=len(values),
            **{
                "runs/s": PER_TICK * (len(times) - 1) / (times[-1] - times[0])
                if len(times) > 1 and times[-1] > times[0]
                else None,
                "claim CPU ms": cpu,
                "CPU ratio": ratio(cpu, base_cpu),
                "candidate buffers": buffers,
                "buffers ratio": ratio(buffers, base_buffers),
                "claim p50 ms": percentile(values, 0.5),
                "claim p99 ms": percentile(values, 0.99),
                "p50 ratio": ratio(percentile(values, 0.5), percentile(base, 0.5)),
                "p99 ratio": ratio(percentile(values, 0.99), percentile(base, 0.99)),
                "settle p50 ms": percentile(settles, 0.5),
                "dead tuples (end)": end[0]["dead_tuples"] if end else None,
                "heap MB (end)": end[0]["heap_bytes"] / 2**20 if end else None,
                "queued index kB (end)": end[0]["queued_index_bytes"] / 1024 if end else None,
            },
        )
    report.data = {
        "claim_cpu_s": line.claim_cpu,
        "claims": line.claims,
        "settles": line.settles,
        "stats": line.stats,
        "events": line.events,
    }
    if ctx.plots:
        report.plots.append(_plot(ctx, line, hold_s=hold_s, history=history))
    return report


def _plot(ctx: Context, line: Timeline, *, hold_s: float, history: int) -> str:
    plt = pyplot()
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ts = [t for t, _, _ in line.claims]
    top.scatter(ts, [ms for _, ms, _ in line.claims], s=2, alpha=0.3, label="claim")
    windows = _windows(line.claims, 5.0)
    top.plot([w[0] for w in windows], [w[1] for w in windows], color="black", label="p50 (5 s)")
    top.plot([w[0] for w in windows], [w[2] for w in windows], color="red", label="p99 (5 s)")
    top.set_yscale("log")
    top.set_ylabel("claim latency (ms)")
    top.legend(fontsize=8, loc="upper left")
    work = top.twinx()
    work.plot(
        [s["t"] for s in line.stats],
        [s["candidate_buffers"] for s in line.stats],
        color="purple",
        label="buffers touched by the candidate query",
    )
    work.set_ylabel("buffers per candidate query")
    work.legend(fontsize=8, loc="upper right")
    st = [s["t"] for s in line.stats]
    middle.plot(st, [s["dead_tuples"] for s in line.stats], label="dead tuples")
    middle.plot(st, [s["xmin_age"] for s in line.stats], label="oldest xmin age (xids)")
    middle.set_ylabel("count")
    middle.legend(fontsize=8, loc="upper left")
    bottom.plot(st, [s["heap_bytes"] / 2**20 for s in line.stats], label="heap MB")
    bottom.plot(st, [s["total_bytes"] / 2**20 for s in line.stats], label="heap + indexes MB")
    bottom.set_ylabel("MB")
    twin = bottom.twinx()
    twin.plot(
        st,
        [s["queued_index_bytes"] / 1024 for s in line.stats],
        color="purple",
        label="queued index kB",
    )
    twin.set_ylabel("queued index kB")
    bottom.legend(fontsize=8, loc="upper left")
    twin.legend(fontsize=8, loc="lower right")
    bottom.set_xlabel("seconds")
    held = [t for t, what in line.events if what in ("snapshot taken", "snapshot released")]
    for axis in (top, middle, bottom):
        if len(held) == 2:
            axis.axvspan(held[0], held[1], color="orange", alpha=0.15)
        for t, what in line.events:
            if what.startswith("VACUUM done"):
                axis.axvline(t, color="green", linestyle="--", linewidth=1)
        axis.grid(True, alpha=0.3)
    fig.suptitle(
        f"{history:,} finished runs retained, {PER_TICK / TICK:.0f} runs/s; snapshot held "
        f"{hold_s:g}s (shaded); green: manual VACUUM"
    )
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _windows(
    points: list[tuple[float, float, str]], width: float
) -> list[tuple[float, float, float]]:
    """(window middle, p50, p99) over consecutive windows of ``width`` seconds."""
    out: list[tuple[float, float, float]] = []
    if not points:
        return out
    start = points[0][0]
    bucket: list[float] = []
    for t, ms, _ in points:
        if t >= start + width and bucket:
            out.append((start + width / 2, percentile(bucket, 0.5), percentile(bucket, 0.99)))
            start, bucket = t, []
        bucket.append(ms)
    if bucket:
        out.append((start + width / 2, percentile(bucket, 0.5), percentile(bucket, 0.99)))
    return out
