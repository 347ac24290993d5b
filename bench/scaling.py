"""Claim scaling with workers: raw SKIP LOCKED (Python and pgbench) vs the dispatcher.

1 to 16 workers, batches 1, 10 and 50, 1,000 definitions with caps far above any
definition's queue (the cap check runs in full, it just never binds), claim only. Arms:

- ``raw``: the seed's query alone, from Python worker processes (psycopg), autocommit;
- ``pgbench``: the same file as a pgbench custom script, ``-c N -j N -T`` — the ceiling
  for that query with no client-side cost at all;
- ``dispatcher``: ``dispatch.run_once`` with a no-op launcher, from the same kind of
  worker processes as ``raw`` — the operator's default, waiting for definition locks in
  sorted order;
- ``try locks``: the same with ``try_locks=True`` (a definition another worker is
  claiming is skipped, not waited for) — what several *concurrent* dispatchers need;
  the operator has one (the tick leader).

Both dispatcher arms claim with one call of ``pgsched.claim_for_dispatch``.

The machine has 2 cores shared by the server, the clients and other work: past 2 workers,
added workers add contention, not capacity. Ratios are to ``raw`` (same client stack).
"""

from __future__ import annotations

from bench import seed
from bench.claiming import MIN_QUEUE, QUICK_MIN_QUEUE, Arm, Series
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.workers import Crew
from pgsched.db import connection

NAME = "scaling"
TITLE = "claim scaling 1-16 workers: raw, pgbench, dispatcher"
DEFINITIONS = 1_000
UNCAPPED = 100_000
FLOOR = 0.25
ARMS = [
    Arm("raw", "raw"),
    Arm("pgbench", "pgbench"),
    Arm("dispatcher", "dispatch"),
    Arm("try locks", "dispatch", try_locks=True),
]
GOAL = 0.5


def run(ctx: Context) -> Report:
    worker_counts = (2,) if ctx.quick else (1, 2, 4, 8, 16)
    batches = (50,) if ctx.quick else (1, 10, 50)
    rounds = ctx.rounds_or(2)
    dsn = ctx.env.create_database("scaling")
    with connection.connect(dsn) as conn, Crew(max(worker_counts)) as crew:
        series = Series(
            crew,
            conn,
            dsn,
            ctx.seconds,
            env=ctx.env,
            min_queue=QUICK_MIN_QUEUE if ctx.quick else MIN_QUEUE,
        )
        seed.definitions(conn, count=DEFINITIONS, cap=UNCAPPED, due=False)
        for round_no in range(rounds):
            for batch in batches:
                for workers in worker_counts:
                    series.cell(
                        (workers, batch), ARMS, workers=workers, batch=batch, round_no=round_no
                    )
    ctx.env.drop_databases()

    report = Report(
        NAME,
        TITLE,
        columns=[
            "batch",
            "workers",
            "raw claims/s",
            "pgbench claims/s",
            "dispatcher claims/s",
            "dispatcher / raw",
            "dispatcher / pgbench",
            "CPU ratio",
            "try locks / raw",
        ],
    )
    for batch in batches:
        for workers in worker_counts:
            cell = (workers, batch)
            report.add(
                batch=batch,
                workers=workers,
                **{
                    "raw claims/s": series.median(cell, "raw"),
                    "pgbench claims/s": series.median(cell, "pgbench"),
                    "dispatcher claims/s": series.median(cell, "dispatcher"),
                    "dispatcher / raw": series.ratio(cell, "dispatcher", "raw"),
                    "dispatcher / pgbench": series.ratio(cell, "dispatcher", "pgbench"),
                    "CPU ratio": series.cpu_ratio(cell, "dispatcher", "raw"),
                    "try locks / raw": series.ratio(cell, "try locks", "raw"),
                },
            )
    top = max(batches)
    for arm in ("dispatcher", "try locks"):
        worst = min(worker_counts, key=lambda w: series.ratio((w, top), arm, "raw"))
        report.floor(
            f"{arm} / raw at batch {top}, worst over {worker_counts[0]}-{worker_counts[-1]}"
            f" workers ({worst} workers)",
            series.ratio((worst, top), arm, "raw"),
            FLOOR,
        )
        report.floor(
            f"(goal) {arm} / raw at batch {top}, worst over {worker_counts[0]}-"
            f"{worker_counts[-1]} workers ({worst} workers)",
            series.ratio((worst, top), arm, "raw"),
            GOAL,
        )
    report.notes.append(
        f"{DEFINITIONS} definitions, caps {UNCAPPED} (never bind), claim only; {rounds} rounds x "
        f"{ctx.seconds:g}s windows (pgbench: whole seconds); medians of rounds, ratios medians "
        "of per-round ratios; CPU ratio = raw's CPU per claim (worker + backend) / the "
        "dispatcher's"
    )
    report.notes += series.lost_notes()
    report.data = {
        "rates": {str(key): value for key, value in series.rates.items()},
        "cpu_us_per_claim": {str(key): value for key, value in series.cpu.items()},
    }
    if ctx.plots:
        report.plots.append(_plot(ctx, series, worker_counts, batches))
    return report


COLORS = {
    "raw": "tab:blue",
    "pgbench": "tab:orange",
    "dispatcher": "tab:green",
    "try locks": "tab:purple",
}


def _plot(
    ctx: Context, series: Series, worker_counts: tuple[int, ...], batches: tuple[int, ...]
) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(2, len(batches), figsize=(4 * len(batches), 7), squeeze=False)
    for column, batch in enumerate(batches):
        top, bottom = axes[0][column], axes[1][column]
        for arm in ARMS:
            top.plot(
                worker_counts,
                [series.median((w, batch), arm.name) for w in worker_counts],
                marker="o",
                color=COLORS[arm.name],
                label=arm.name,
            )
        for baseline, style in (("raw", "-"), ("pgbench", ":")):
            bottom.plot(
                worker_counts,
                [series.ratio((w, batch), "dispatcher", baseline) for w in worker_counts],
                marker="o",
                linestyle=style,
                color=COLORS["dispatcher"],
                label=f"dispatcher / {baseline}",
            )
        bottom.plot(
            worker_counts,
            [series.ratio((w, batch), "try locks", "raw") for w in worker_counts],
            marker="o",
            color=COLORS["try locks"],
            label="try locks / raw",
        )
        bottom.axhline(FLOOR, color="black", linestyle="--", linewidth=1, label="floor 25%")
        bottom.axhline(GOAL, color="grey", linestyle=":", linewidth=1, label=f"goal {GOAL:.0%}")
        bottom.set_ylim(0, max(1.0, bottom.get_ylim()[1]))
        bottom.set_ylabel("ratio")
        top.set_title(f"batch {batch}")
        top.set_yscale("log")
        top.set_ylabel("claims/s")
        for axis in (top, bottom):
            axis.set_xscale("log", base=2)
            axis.set_xticks(worker_counts, [str(w) for w in worker_counts])
            axis.set_xlabel("workers")
            axis.grid(True, alpha=0.3)
    axes[0][-1].legend(fontsize=8)
    axes[1][-1].legend(fontsize=8)
    fig.suptitle("Claim throughput vs workers (1,000 definitions, 2-core machine)")
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
