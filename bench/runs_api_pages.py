"""The Run API's pages (``kubectl get runs --limit 50``) as history grows.

One database per namespace size (ScheduledJobs in the listed namespace: 10, 100, 1,000 by
default), each grown level by level (10k, 100k, 1M finished runs by default;
``PGSCHED_BENCH_RUNS_API`` lists other levels, e.g. ``10000,1000000,10000000``). At each
level the Run API's own query (``runs_api_page``, what ``k8s.runs_api.store`` sends) is
timed for three pages of 50: the first, one deep in the history (the continue token of a
run in the middle), and the first of ``--field-selector status.phase=FAILED`` (5% of the
runs). Ratios are to the same page at the smallest level of the same database, measured
in the same run: a page that costs O(page) stays near 1.0x however long the history.

The history sits in the default partition here (one table); a cluster keeping months of
history has a partition per month, which this does not measure.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench import queries, seed
from bench.context import Context
from bench.report import Report, pyplot, save_plot
from bench.stats import percentile, ratio
from pgsched.db import connection
from pgsched.db import queries as engine_queries

NAME = "runs_api_pages"
TITLE = "kubectl get runs --limit 50: page time vs history rows"
PAGE = 50
GOAL_MS = 100.0  # issue 38: p99 server time of a 50-run page at 10M history rows
PAGES = ("first", "deep", "failed")


def levels(quick: bool) -> list[int]:
    raw = os.environ.get("PGSCHED_BENCH_RUNS_API", "")
    if raw.strip():
        return sorted({int(part) for part in raw.split(",")})
    return [2_000, 6_000] if quick else [10_000, 100_000, 1_000_000]


def run(ctx: Context) -> Report:
    sizes = levels(ctx.quick)
    namespace_sizes = [10, 100] if ctx.quick else [10, 100, 1_000]
    repeats = ctx.rounds_or(5 if ctx.quick else 200)
    rows: list[dict[str, Any]] = []
    try:
        for definitions in namespace_sizes:
            conn = connection.connect(ctx.env.create_database(f"runs_api_{definitions}"))
            try:
                seed.definitions(conn, count=definitions, cap=5, due=False)
                have = 0
                for size in sizes:
                    seed.history(conn, size - have, start=have + 1)
                    have = size
                    conn.execute(queries.get("vacuum_analyze_runs"))
                    for page, params in _pages(conn).items():
                        times = _timed(conn, params, repeats)
                        rows.append(
                            {
                                "ScheduledJobs": definitions,
                                "history rows": size,
                                "page": page,
                                "p50 ms": percentile(times, 0.5),
                                "p99 ms": percentile(times, 0.99),
                            }
                        )
            finally:
                conn.close()
    finally:
        ctx.env.drop_databases()
    return _report(ctx, rows, sizes)


def _pages(conn: connection.Connection) -> dict[str, dict[str, Any]]:
    middle = conn.execute(queries.get("middle_run_id")).fetchone()
    assert middle is not None
    base = {"namespaces": ["bench"], "scheduled_job": None, "limit": PAGE + 1}
    return {
        "first": {**base, "statuses": None, "before": 2**63 - 1},
        "deep": {**base, "statuses": None, "before": middle["id"]},
        "failed": {**base, "statuses": ["FAILED"], "before": 2**63 - 1},
    }


def _timed(conn: connection.Connection, params: dict[str, Any], repeats: int) -> list[float]:
    query = engine_queries.get("runs_api_page")
    found = conn.execute(query, params).fetchall()  # warm, and check it is a full page
    assert len(found) == PAGE + 1, f"a page of {len(found)} runs, not {PAGE + 1}"
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        conn.execute(query, params).fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _report(ctx: Context, rows: list[dict[str, Any]], sizes: list[int]) -> Report:
    report = Report(
        NAME,
        TITLE,
        ["ScheduledJobs", "history rows", "page", "p50 ms", "p99 ms", "p99 ratio"],
    )
    smallest = {
        (row["ScheduledJobs"], row["page"]): row["p99 ms"]
        for row in rows
        if row["history rows"] == sizes[0]
    }
    for row in rows:
        report.add(
            **row,
            **{"p99 ratio": ratio(row["p99 ms"], smallest[(row["ScheduledJobs"], row["page"])])},
        )
    largest = [row for row in report.rows if row["history rows"] == sizes[-1]]
    worst = max(largest, key=lambda row: row["p99 ms"])
    report.floor(
        f"p99 of a {PAGE}-run page at {sizes[-1]:,} history rows (worst page, any namespace)",
        worst["p99 ms"],
        GOAL_MS,
        higher_is_better=False,
    )
    report.notes.append(
        "Database time of the Run API's query alone (no TLS, no API server): the page as"
        " the store reads it. Ratios are to the same page at the smallest level."
    )
    if ctx.plots:
        report.plots.append(_plot(ctx, report.rows, sizes))
    return report


def _plot(ctx: Context, rows: list[dict[str, Any]], sizes: list[int]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for definitions in sorted({row["ScheduledJobs"] for row in rows}):
        for page in PAGES:
            points = [
                row for row in rows if row["ScheduledJobs"] == definitions and row["page"] == page
            ]
            ax.plot(
                [row["history rows"] for row in points],
                [row["p99 ms"] for row in points],
                marker="o",
                label=f"{definitions} ScheduledJobs, {page} page",
            )
    ax.set_xscale("log")
    ax.set_xlabel("history rows")
    ax.set_ylabel("p99 ms")
    ax.axhline(GOAL_MS, linestyle="--", color="grey")
    ax.legend(fontsize=7)
    return save_plot(fig, ctx.out_dir, NAME)
