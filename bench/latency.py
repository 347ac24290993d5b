"""Claim latency with a million finished runs retained vs an empty table.

Two databases on the same server, identical but for history: both have 1,000 definitions
and a backlog of 2,000 due QUEUED runs; one also holds 1,000,000 finished runs (settled,
5% failed), as months of operation leave them. One process alternates between them in
blocks, timing single claims of batch 50 (the tick's default): the dispatcher
(``dispatch.run_once``, no-op launcher) and, as the baseline, the seed's raw query.

After every timed claim (neither of these is timed) as many new runs are queued, so the
backlog stays level, and the claimed batch is finished: completed and kept in the history
database, deleted in the empty one — "empty" means no finished run is ever retained.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from psycopg import sql

from bench import queries, seed
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.stats import percentile, ratio
from bench.workers import backend_cpu
from pgsched.db import connection
from pgsched.db import queries as engine_queries
from pgsched.engine import dispatch, launcher

NAME = "latency"
TITLE = "claim latency, 1M finished runs retained vs empty"
DEFINITIONS = 1_000
BACKLOG = 2_000
BATCH = 50
FLOOR = 2.0  # p99 with history <= 2x empty p99


def run(ctx: Context) -> Report:
    history_rows = 20_000 if ctx.quick else 1_000_000
    blocks, per_block = (2, 10) if ctx.quick else (24, 25)
    tables = {"empty": 0, "1M history": history_rows}
    if ctx.quick:
        tables = {"empty": 0, f"{history_rows // 1000}k history": history_rows}
    conns: dict[str, connection.Connection] = {}
    for label, rows in tables.items():
        conns[label] = connection.connect(ctx.env.create_database("latency"))
        _prepare(conns[label], history=rows)
    retain = {label: rows > 0 for label, rows in tables.items()}
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    arms = {"dispatcher": dispatcher_claim, "raw": _raw}
    try:
        for block in range(blocks):
            order = list(conns) if block % 2 == 0 else list(reversed(conns))
            for label in order:
                for arm, claim in arms.items():
                    for _ in range(per_block):
                        elapsed, used = timed_cycle(conns[label], claim, retain=retain[label])
                        samples[(label, arm)].append(elapsed)
                        cpu[(label, arm)].append(used)
        plans = {label: _candidate_plan(conn) for label, conn in conns.items()}
        sizes = {label: _sizes(conn) for label, conn in conns.items()}
    finally:
        for conn in conns.values():
            conn.close()
        ctx.env.drop_databases()

    empty, full = list(tables)
    report = Report(
        NAME,
        TITLE,
        columns=[
            "claim",
            "table",
            "samples",
            "p50 ms",
            "p99 ms",
            "p50 ratio",
            "p99 ratio",
            "CPU ms/claim",
            "CPU ratio",
        ],
    )
    for arm in arms:
        base = samples[(empty, arm)]
        for label in tables:
            values = samples[(label, arm)]
            report.add(
                claim=f"{arm} (batch {BATCH})",
                table=label,
                samples=len(values),
                **{
                    "p50 ms": percentile(values, 0.5) * 1000,
                    "p99 ms": percentile(values, 0.99) * 1000,
                    "p50 ratio": ratio(percentile(values, 0.5), percentile(base, 0.5)),
                    "p99 ratio": ratio(percentile(values, 0.99), percentile(base, 0.99)),
                    "CPU ms/claim": _mean(cpu[(label, arm)]) * 1000,
                    "CPU ratio": ratio(_mean(cpu[(label, arm)]), _mean(cpu[(empty, arm)])),
                },
            )
    report.floor(
        f"dispatcher claim p99 with {full} / empty p99",
        ratio(
            percentile(samples[(full, "dispatcher")], 0.99),
            percentile(samples[(empty, "dispatcher")], 0.99),
        ),
        FLOOR,
        higher_is_better=False,
    )
    report.notes.append(
        f"{DEFINITIONS} definitions, backlog of {BACKLOG} due runs kept level, batch {BATCH}; "
        f"{blocks} alternating blocks of {per_block} claims per table and claim; ratios are "
        "to the same claim on the empty table; CPU = this process + its backend during the "
        "claim (mean), the measure least disturbed by other load on the machine"
    )
    report.data = {
        "samples_ms": {f"{t}/{a}": [v * 1000 for v in s] for (t, a), s in samples.items()},
        "candidate_plan": plans,
        "sizes": sizes,
    }
    if ctx.plots:
        report.plots.append(_plot(ctx, samples, list(tables), list(arms)))
    return report


def _mean(values: list[float]) -> float:
    # /proc counts CPU in 10 ms ticks: one claim's share is coarse, the mean of many is not.
    return sum(values) / len(values) if values else float("nan")


def _prepare(conn: connection.Connection, *, history: int) -> None:
    seed.definitions(conn, count=DEFINITIONS, cap=5, due=False)
    if history:
        seed.history(conn, history)
    seed.queued(conn, BACKLOG)
    conn.execute(queries.get("vacuum_analyze_runs"))


def dispatcher_claim(conn: connection.Connection) -> list[int]:
    result = dispatch.run_once(conn, launcher.NullLauncher(), batch_size=BATCH)
    return [run.id for run in result.claimed]


def _raw(conn: connection.Connection) -> list[int]:
    return [row["id"] for row in conn.execute(queries.raw_claim(), {"batch": BATCH})]


def timed_cycle(
    conn: connection.Connection,
    claim: Callable[[connection.Connection], list[int]],
    *,
    retain: bool,
) -> tuple[float, float]:
    """Time one claim (wall clock, and CPU of this process + its backend); then finish the
    batch (kept or deleted) and queue as many runs."""
    cpu = time.process_time() + backend_cpu(conn.info.backend_pid)
    started = time.perf_counter()
    ids = claim(conn)
    elapsed = time.perf_counter() - started
    used = time.process_time() + backend_cpu(conn.info.backend_pid) - cpu
    conn.execute(queries.get("complete_runs" if retain else "delete_runs"), {"ids": ids})
    seed.queued(conn, len(ids))
    return elapsed, used


def _candidate_plan(conn: connection.Connection) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the dispatcher's candidate query, rolled back."""
    query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) {}").format(engine_queries.get("claim_candidates"))
    with conn.transaction(force_rollback=True):
        rows = conn.execute(
            query,
            {"now": None, "limit": BATCH * dispatch.DEFAULT_OVERSHOOT, "definition_ids": None},
        ).fetchall()
    return [row["QUERY PLAN"] for row in rows]


def _sizes(conn: connection.Connection) -> dict[str, Any]:
    row = conn.execute(queries.get("table_stats")).fetchone()
    return dict(row) if row else {}


def _plot(
    ctx: Context, samples: dict[tuple[str, str], list[float]], tables: list[str], arms: list[str]
) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(arms), figsize=(10, 4), sharey=False)
    for axis, arm in zip(axes, arms, strict=True):
        for label in tables:
            values = sorted(v * 1000 for v in samples[(label, arm)])
            fractions = [(i + 1) / len(values) for i in range(len(values))]
            axis.plot(values, fractions, label=f"{label} (p99 {percentile(values, 0.99):.1f} ms)")
        axis.set_title(f"{arm} claim, batch {BATCH}")
        axis.set_xlabel("latency (ms)")
        axis.set_xscale("log")
        axis.grid(True, alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("fraction of claims")
    fig.suptitle("Claim latency CDF: history retained vs empty table")
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
