"""The same burn-down with a peer: procrastinate vs pgsched.

One database holds both: pgsched's schema (``pgsched``) and procrastinate's (``public``,
applied through its App API, i.e. what ``procrastinate schema --apply`` runs). Each round
queues the same number of jobs for each system and lets N worker processes burn the
queue down; a job is claimed, runs a no-op, and is recorded as finished:

- procrastinate: ``App.run_worker_async(wait=False)`` per process, an ``async`` no-op task
  (its cheapest path: no thread hand-off), LISTEN/NOTIFY off (the queue is full anyway),
  finished jobs kept (``delete_jobs="never"``, like pgsched keeps its history);
- pgsched: ``dispatch.run_once`` (no-op launcher, caps far above any definition's queue)
  then ``lease.finish(..., "COMPLETED")`` per run — the job side's fenced API.

procrastinate fetches one job per query, so pgsched runs twice: at batch 1 (like for
like) and at batch 50 (the tick's default, how it is meant to run). Figures are jobs/s from
a common start to the last worker's exit, medians of rounds; ratios are to procrastinate.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from bench import queries, seed
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.stats import median, paired_ratio
from bench.workers import START_LEAD, Crew, CrewLost, Outcome, Task, clock
from pgsched.db import connection

NAME = "peer"
TITLE = "burn-down vs procrastinate: claim + complete a no-op"
DEFINITIONS = 1_000
UNCAPPED = 100_000
QUEUE = "bench"
TASK = "bench_noop"


@dataclass(frozen=True)
class PeerTask:
    dsn: str
    start_at: float
    concurrency: int


def _app(dsn: str, pool_size: int = 2) -> Any:
    """A procrastinate App with the no-op task registered (in every process)."""
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size)
    )

    @app.task(name=TASK, queue=QUEUE)
    async def noop() -> None:
        return None

    return app


def procrastinate_worker(task: PeerTask) -> Outcome:
    """One procrastinate worker process until the queue is empty (runs in a pool process)."""

    async def work() -> tuple[float, float]:
        app = _app(task.dsn, pool_size=task.concurrency + 1)
        async with app.open_async():
            await asyncio.sleep(max(0.0, task.start_at - clock()))
            started = clock()
            await app.run_worker_async(
                queues=[QUEUE],
                wait=False,
                concurrency=task.concurrency,
                listen_notify=False,
                install_signal_handlers=False,
                delete_jobs="never",
            )
            return started, clock()

    started, ended = asyncio.run(work())
    return Outcome(claims=0, calls=0, empty_calls=0, at_cap=0, started=started, ended=ended)


@dataclass(frozen=True)
class Arm:
    name: str
    system: str  # procrastinate | pgsched
    batch: int = 1  # pgsched's batch
    concurrency: int = 1  # procrastinate's per-process concurrency


ARMS = [
    Arm("procrastinate", "procrastinate"),
    Arm("procrastinate c=4", "procrastinate", concurrency=4),
    Arm("pgsched batch 1", "pgsched", batch=1),
    Arm("pgsched batch 50", "pgsched", batch=50),
]
BASELINE = "procrastinate"


def run(ctx: Context) -> Report:
    rounds = ctx.rounds_or(3)
    jobs = 200 if ctx.quick else 4_000
    worker_counts = (2,) if ctx.quick else (1, 4)
    dsn = ctx.env.create_database("peer")
    rates: dict[tuple[int, str], list[float]] = defaultdict(list)
    app = _app(dsn)
    try:
        with connection.connect(dsn) as conn, app.open(), Crew(max(worker_counts)) as crew:
            app.schema_manager.apply_schema()
            seed.definitions(conn, count=DEFINITIONS, cap=UNCAPPED, due=False)
            for round_no in range(rounds):
                for workers in worker_counts:
                    shift = round_no % len(ARMS)
                    for arm in ARMS[shift:] + ARMS[:shift]:
                        seconds = _burn_down(crew, conn, app, dsn, arm, workers=workers, jobs=jobs)
                        rates[(workers, arm.name)].append(jobs / seconds)
                        print(
                            f"  r{round_no} w={workers:<2d} {arm.name:18s} {jobs} jobs in "
                            f"{seconds:6.2f}s = {jobs / seconds:7.0f} jobs/s",
                            flush=True,
                        )
    finally:
        ctx.env.drop_databases()

    report = Report(NAME, TITLE, columns=["workers", "system", "jobs/s", f"ratio to {BASELINE}"])
    for workers in worker_counts:
        for arm in ARMS:
            report.add(
                workers=workers,
                system=arm.name,
                **{
                    "jobs/s": median(rates[(workers, arm.name)]),
                    f"ratio to {BASELINE}": paired_ratio(
                        rates[(workers, arm.name)], rates[(workers, BASELINE)]
                    ),
                },
            )
        best_peer = max(
            (a for a in ARMS if a.system == "procrastinate"),
            key=lambda a: median(rates[(workers, a.name)]),
        )
        report.floor(
            f"pgsched (batch 50) / procrastinate's best ({best_peer.name}), {workers} worker(s)",
            paired_ratio(rates[(workers, "pgsched batch 50")], rates[(workers, best_peer.name)]),
            1.0,
        )
    report.notes.append(
        f"{jobs} jobs per burn-down, {rounds} rounds, arms rotated each round; procrastinate "
        f"{_version()} with psycopg 3; pgsched over {DEFINITIONS} definitions"
    )
    report.data = {"rates": {f"{w}/{a}": v for (w, a), v in rates.items()}}
    if ctx.plots:
        report.plots.append(_plot(ctx, rates, worker_counts))
    return report


def _burn_down(
    crew: Crew,
    conn: connection.Connection,
    app: Any,
    dsn: str,
    arm: Arm,
    *,
    workers: int,
    jobs: int,
) -> float:
    """Queue ``jobs`` for the arm's system, burn them down, check all finished; seconds.
    (Once more from scratch if a worker process was lost on the way.)"""
    try:
        return _burn_down_once(crew, conn, app, dsn, arm, workers=workers, jobs=jobs)
    except CrewLost as lost:
        print(f"  ({lost}; burning down again)", flush=True)
        return _burn_down_once(crew, conn, app, dsn, arm, workers=workers, jobs=jobs)


def _burn_down_once(
    crew: Crew,
    conn: connection.Connection,
    app: Any,
    dsn: str,
    arm: Arm,
    *,
    workers: int,
    jobs: int,
) -> float:
    conn.execute(queries.get("truncate_procrastinate"))
    conn.execute(queries.get("truncate_runs"))
    start = clock() + START_LEAD + 0.4  # procrastinate's App takes a moment to import
    if arm.system == "procrastinate":
        app.tasks[TASK].batch_defer(*({} for _ in range(jobs)))
        conn.execute(queries.get("vacuum_analyze_procrastinate"))
        tasks = [PeerTask(dsn, start, arm.concurrency)] * workers
        outcomes = crew.run(tasks, procrastinate_worker)
        done = conn.execute(queries.get("count_procrastinate_done")).fetchone()
    else:
        seed.queued(conn, jobs)
        conn.execute(queries.get("vacuum_analyze_runs"))
        task = Task(dsn, "dispatch", arm.batch, start, start + 3600, complete="lease")
        outcomes = crew.run([task] * workers)
        done = conn.execute(queries.get("count_completed")).fetchone()
    assert done is not None and done["done"] == jobs, f"{arm.name}: {done} of {jobs} finished"
    return max(item.ended for item in outcomes) - start


def _version() -> str:
    from importlib.metadata import version

    return version("procrastinate")


def _plot(
    ctx: Context, rates: dict[tuple[int, str], list[float]], worker_counts: tuple[int, ...]
) -> str:
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(ARMS)
    for index, arm in enumerate(ARMS):
        xs = [position + index * width for position in range(len(worker_counts))]
        values = [median(rates[(w, arm.name)]) for w in worker_counts]
        bars = axis.bar(xs, values, width, label=arm.name)
        axis.bar_label(bars, fmt="%.0f", fontsize=7)
    axis.set_xticks(
        [position + width * (len(ARMS) - 1) / 2 for position in range(len(worker_counts))],
        [f"{w} worker{'s' if w > 1 else ''}" for w in worker_counts],
    )
    axis.set_ylabel("jobs/s (claim + complete a no-op)")
    axis.set_title("Burn-down throughput: pgsched vs procrastinate, same database")
    axis.legend(fontsize=8)
    axis.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
