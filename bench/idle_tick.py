"""An idle tick as definitions grow: 1k, 10k, 100k, 1M, none due.

A whole ``Ticker.run_once`` — leader election, materialize (two kinds), reap, settle,
dispatch, release — on its own session, exactly as every replica runs it once a second
whether or not anything is due. One database grows in steps (1,000 → 10,000 → 100,000 →
1,000,000 definitions, none due for the next hour, and as many finished runs of history);
at each step its ticks alternate with the same tick on a database with no definitions at
all, on the same server, so each ratio is what that many idle definitions cost a tick,
measured against a baseline taken in the same minutes. The result is a curve: a flat
tick is one whose every query reads an index range that idle definitions never enter.
"""

from __future__ import annotations

from collections import defaultdict

from bench import queries, seed
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.stats import median, percentile, ratio
from pgsched.db import connection
from pgsched.engine import launcher
from pgsched.engine.tick import Ticker, TickSettings

NAME = "idle_tick"
TITLE = "idle tick vs definitions (1k-1M), none due"
FLOOR_MS = 20.0  # the floor: the median idle tick with 100,000 definitions
GOAL_MS = 5.0  # the goal: the same, tighter
GOAL_AT = 100_000
PHASES = ("tick", "materialize", "reap", "settle", "dispatch")
SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (200, 2_000)
EMPTY = "no definitions"


class OperatorTickLauncher(launcher.NullLauncher):
    """Launches nothing, and is what the Kubernetes operator's launcher is to the tick: its
    outcomes are kept in Jobs (reap asks for verdicts) and it records every launch (reap
    reads claims never launched). So the reap phase measured is the operator's."""

    keeps_outcomes = True
    records_every_launch = True


def run(ctx: Context) -> Report:
    sizes = QUICK_SIZES if ctx.quick else SIZES
    ticks = 20 if ctx.quick else 300
    dsns = {EMPTY: ctx.env.create_database("tick"), "grown": ctx.env.create_database("tick")}
    tickers = {
        label: Ticker(
            lambda dsn=dsn: connection.connect(dsn), OperatorTickLauncher(), TickSettings()
        )
        for label, dsn in dsns.items()
    }
    durations: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    busy = 0  # ticks that found something to do: the benchmark would not be idle
    try:
        with connection.connect(dsns["grown"]) as conn:
            seeded = 0
            for size in sizes:
                seed.definitions(conn, count=size - seeded, cap=1, due=False, first=seeded)
                seed.history(conn, size - seeded, start=seeded + 1)
                seeded = size
                conn.execute(queries.get("vacuum_analyze_all"))
                busy += _measure(tickers, size, ticks, durations)
    finally:
        for ticker in tickers.values():
            ticker.close()
        ctx.env.drop_databases()

    report = Report(
        NAME,
        TITLE,
        columns=[
            "definitions",
            "phase",
            "ticks",
            "median ms",
            "p99 ms",
            "empty median ms",
            "ratio",
        ],
    )
    for size in sizes:
        for phase in PHASES:
            values = durations[(size, "grown", phase)]
            base = durations[(size, EMPTY, phase)]
            report.add(
                definitions=size,
                phase=phase,
                ticks=len(values),
                **{
                    "median ms": median(values),
                    "p99 ms": percentile(values, 0.99),
                    "empty median ms": median(base),
                    "ratio": ratio(median(values), median(base)),
                },
            )
    at = GOAL_AT if GOAL_AT in sizes else max(sizes)
    tick_at = median(durations[(at, "grown", "tick")])
    report.floor(
        f"idle tick median ms with {at:,} definitions", tick_at, FLOOR_MS, higher_is_better=False
    )
    report.floor(
        f"idle tick median ms with {at:,} definitions (goal)",
        tick_at,
        GOAL_MS,
        higher_is_better=False,
    )
    report.notes.append(
        f"{ticks} ticks per database and size, alternating with the empty database; 'tick'"
        " includes leader election and release; as many finished runs as definitions;"
        f" {busy} ticks materialized something"
    )
    report.data = {
        "durations_ms": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in durations.items()},
    }
    if ctx.plots:
        report.plots.append(_plot(ctx, sizes, durations))
    return report


def _measure(
    tickers: dict[str, Ticker],
    size: int,
    ticks: int,
    durations: dict[tuple[int, str, str], list[float]],
) -> int:
    busy = 0
    for ticker in tickers.values():
        for _ in range(5):  # warm up: connect, plan caches, the new size's statistics
            ticker.run_once()
    for index in range(ticks):
        order = list(tickers) if index % 2 == 0 else list(reversed(tickers))
        for label in order:
            result = tickers[label].run_once()
            assert result.leader and result.error is None, result.error
            if result.materialized and result.materialized.definitions:
                busy += 1
            for phase in PHASES:
                durations[(size, label, phase)].append(result.durations[phase] * 1000)
    return busy


def _plot(
    ctx: Context, sizes: tuple[int, ...], durations: dict[tuple[int, str, str], list[float]]
) -> str:
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(7, 4))
    for phase in PHASES:
        axis.plot(
            sizes,
            [median(durations[(size, "grown", phase)]) for size in sizes],
            marker="o",
            label=f"{phase} (median)",
            linewidth=2 if phase == "tick" else 1,
        )
    axis.plot(
        sizes,
        [percentile(durations[(size, "grown", "tick")], 0.99) for size in sizes],
        marker="x",
        linestyle=":",
        label="tick (p99)",
    )
    axis.plot(
        sizes,
        [median(durations[(size, EMPTY, "tick")]) for size in sizes],
        linestyle="--",
        color="grey",
        label="tick, no definitions (median)",
    )
    axis.axhline(GOAL_MS, color="red", linewidth=1, label=f"goal at {GOAL_AT:,}: {GOAL_MS:g} ms")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xticks(sizes, [f"{size:,}" for size in sizes])
    axis.set_xlabel("idle definitions (and finished runs)")
    axis.set_ylabel("ms")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title("An idle tick as definitions grow")
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
