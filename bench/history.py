"""Claim latency as run history grows, and retention by dropping a month.

Four databases on one server, each with 1,000 definitions and a level backlog of 2,000 due
QUEUED runs: ``empty`` (a fresh install: no finished run is ever kept), ``parts`` (empty
partitions for the months ``grown`` spans at its largest), ``many`` (``MANY_MONTHS`` empty
months before this one: what the number of partitions costs by itself) and ``grown``, whose
history grows level by level (0, 1M, 10M finished runs by default; ``PGSCHED_BENCH_HISTORY``
lists other levels, e.g. ``0,1000000,10000000,30000000``). History is generated inside
Postgres (``generate_series``, 1M rows a statement) and spread evenly over the
``SPAN_DAYS`` days before yesterday, at the density of the largest level, so each level
adds older months (partitions) to the table; every tenth run is one job's (the "big job").

At each level one process rotates blocks of dispatcher claims (batch 50,
``dispatch.run_once``) over the databases, so the ratios to ``empty`` are measured in
the same minutes; the claimed batch is completed (kept in ``grown``, deleted in ``empty``)
and as many runs queued again. ``pgsched runs`` of the big job is timed too.

Retention, at the largest level: a claimer thread claims on ``grown`` continuously while
the history service drops the oldest month (``history.run_once`` with a retention that
expires just that month): how long the drop took, the WAL it wrote, and the claim cycles'
latency (claim, finish the batch, queue as many) while it ran vs the seconds before.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import sql

from bench import queries, seed
from bench.context import Context
from bench.latency import dispatcher_claim, timed_cycle
from bench.report import Report, plot_path, pyplot
from bench.stats import percentile, ratio
from pgsched.db import connection
from pgsched.db import queries as engine_queries
from pgsched.engine import history

NAME = "history"
TITLE = "claim latency vs history rows, and dropping a month"
DEFINITIONS = 1_000
BACKLOG = 2_000
SPAN_DAYS = 120
CHUNK = 1_000_000
GOAL = 1.2  # claim p99 at the largest history <= 1.2x empty; claims during a drop likewise
EXTRAPOLATE_TO = 100_000_000
LISTED = 20  # pgsched runs' default --limit
WINDOW_S = 5.0  # retention: seconds of claims measured before and after the drop
MANY_MONTHS = 24  # the many-partitions database: two years kept without retention
DROP_ROUNDS = 30  # history service rounds tried for the drop, a second apart


def levels(quick: bool) -> list[int]:
    raw = os.environ.get("PGSCHED_BENCH_HISTORY", "")
    if raw.strip():
        return sorted({int(part) for part in raw.split(",")})
    return [0, 5_000, 20_000] if quick else [0, 1_000_000, 10_000_000]


def run(ctx: Context) -> Report:
    sizes = levels(ctx.quick)
    blocks, per_block = (2, 5) if ctx.quick else (12, 25)
    empty = connection.connect(ctx.env.create_database("history_empty"))
    parts = connection.connect(ctx.env.create_database("history_parts"))
    many = connection.connect(ctx.env.create_database("history_many"))
    grown = connection.connect(ctx.env.create_database("history_grown"))
    rows: list[dict[str, Any]] = []
    try:
        _prepare(empty)
        _prepare(parts)
        _empty_months(parts, since=datetime.now(UTC) - timedelta(days=SPAN_DAYS + 1))
        _prepare(many)
        this_month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        _empty_months(many, since=history.add_months(this_month, -MANY_MONTHS))
        big = _prepare(grown)
        have = 0
        for level in sizes:
            started = time.monotonic()
            load(grown, big, first=have + 1, last=level, total=max(sizes[-1], 1))
            load_s = time.monotonic() - started
            have = level
            conns = {"empty": empty, "parts": parts, "many": many, "grown": grown}
            rows.append(_measure(conns, big, level, load_s, blocks, per_block))
        retention = _drop_oldest_month(grown, window=1.0 if ctx.quick else WINDOW_S)
    finally:
        for conn in (empty, parts, many, grown):
            conn.close()
        ctx.env.drop_databases()
    return _report(ctx, rows, retention, blocks, per_block)


def _one(conn: connection.Connection, name: str, **params: Any) -> dict[str, Any]:
    row = conn.execute(queries.get(name), params).fetchone()
    assert row is not None, name
    return row


def _prepare(conn: connection.Connection) -> Any:
    """Definitions, this month's partition and the next ones, the backlog; returns the big
    job's id."""
    seed.definitions(conn, count=DEFINITIONS, cap=5, due=False)
    history.run_once(conn, retention=None)
    seed.queued(conn, BACKLOG)
    conn.execute(queries.get("vacuum_analyze_runs"))
    return _one(conn, "big_job")["id"]


def load(conn: connection.Connection, big: Any, *, first: int, last: int, total: int) -> None:
    """History rows ``first``..``last`` of ``total``, month by month: into the month's
    partition if it exists, else into a new table attached afterwards (its indexes then
    built in bulk: how the history service creates a month, with the rows already in)."""
    if last < first:
        return
    base = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    step = timedelta(days=SPAN_DAYS) / total
    newest, oldest = base - step * first, base - step * last
    month = datetime(oldest.year, oldest.month, 1, tzinfo=UTC)
    while month <= newest:
        low, high = month, history.add_months(month, 1)
        table = sql.Identifier("pgsched", history.partition_name(month))
        exists = _one(
            conn, "partition_exists", partition=f"pgsched.{history.partition_name(month)}"
        )
        if not exists["found"]:
            conn.execute(queries.get("stage_month").format(table=table))
        params = {"total": total, "span_days": SPAN_DAYS, "big": big, "base": base}
        params |= {"low": low, "high": high}
        # Only the rows of this month (the WHERE keeps exactly them), a million at a time.
        g_low = max(first, int((base - high) / step))
        g_high = min(last, int((base - low) / step) + 1)
        for chunk in range(g_low, g_high + 1, CHUNK):
            params |= {"first": chunk, "last": min(g_high, chunk + CHUNK - 1)}
            conn.execute(queries.get("seed_history_span").format(table=table), params)
        if not exists["found"]:
            bounds = {"table": table, "low": sql.Literal(low), "high": sql.Literal(high)}
            for step_name in ("attach_month", "attach_month_partition", "attached_month"):
                conn.execute(queries.get(step_name).format(**bounds))
        month = high
    conn.execute(queries.get("analyze_runs"))


def _empty_months(conn: connection.Connection, *, since: datetime) -> None:
    """Every month from ``since`` on as an empty partition: the partitions of the grown
    database at its largest, without its rows (what partitions cost, apart from rows)."""
    month = datetime(since.year, since.month, 1, tzinfo=UTC)
    while month < datetime.now(UTC):
        name = f"pgsched.{history.partition_name(month)}"
        if not _one(conn, "partition_exists", partition=name)["found"]:
            conn.execute(queries.get("create_partition"), {"month": month})
        month = history.add_months(month, 1)
    conn.execute(queries.get("vacuum_analyze_runs"))


def _measure(
    conns: dict[str, connection.Connection],
    big: Any,
    level: int,
    load_s: float,
    blocks: int,
    per_block: int,
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {label: [] for label in conns}
    labels = list(conns)
    grown = conns["grown"]
    for block in range(blocks):
        shift = block % len(labels)
        for label in labels[shift:] + labels[:shift]:
            for _ in range(per_block):
                elapsed, _used = timed_cycle(
                    conns[label], dispatcher_claim, retain=label == "grown"
                )
                samples[label].append(elapsed)
    listing, failed = [], []
    for _ in range(5 if blocks < 4 else 20):
        listing.append(_runs_of(grown, big, statuses=None))
        failed.append(_runs_of(grown, big, statuses=["FAILED"]))
    big_runs = level // 10
    return {
        "rows": level,
        "load_s": load_s,
        "disk_bytes": _one(grown, "database_bytes")["bytes"],
        "partitions": _one(grown, "partition_count")["n"],
        "empty": samples["empty"],
        "parts": samples["parts"],
        "parts_partitions": _one(conns["parts"], "partition_count")["n"],
        "many": samples["many"],
        "many_partitions": _one(conns["many"], "partition_count")["n"],
        "grown": samples["grown"],
        "listing": listing,
        "failed": failed,
        "big_runs": big_runs,
    }


def _runs_of(conn: connection.Connection, big: Any, *, statuses: list[str] | None) -> float:
    """Seconds for the query of ``pgsched runs SJ`` (``--status`` when ``statuses``)."""
    started = time.perf_counter()
    conn.execute(
        engine_queries.get("run_history"),
        {"definition_ids": [big], "statuses": statuses, "limit": LISTED},
    ).fetchall()
    return time.perf_counter() - started


def _drop_oldest_month(grown: connection.Connection, *, window: float) -> dict[str, Any]:
    """Claims on their own connection, continuously, while the oldest month is dropped."""
    oldest = _one(grown, "oldest_month")
    month_end = history.add_months(history.month_of(oldest["name"]), 1)
    # Expires exactly the oldest month: it ended before now - retention, the next did not.
    retention = datetime.now(UTC) - month_end - timedelta(minutes=1)
    dsn = grown.info.dsn
    stop = threading.Event()
    claims: list[tuple[float, float]] = []

    def claimer() -> None:
        # The whole cycle is timed (claim, finish the batch, queue as many): a worker's
        # finish waits for job_runs' lock as much as a claim does, and timing the claim
        # alone would hide a wait that fell on the rest of the cycle.
        with connection.connect(dsn) as conn:
            while not stop.is_set():
                started = time.perf_counter()
                timed_cycle(conn, dispatcher_claim, retain=True)
                claims.append((started, time.perf_counter() - started))

    thread = threading.Thread(target=claimer, name="history-bench-claimer")
    thread.start()
    try:
        time.sleep(window)
        # A month the service cannot drop this round (a live run in it, or the table lock
        # not granted within its wait: after a bulk load autovacuum may hold a partition)
        # is kept for its next round; the bench's rounds follow each other a second apart.
        rounds = 0
        while True:
            rounds += 1
            since = _one(grown, "wal_lsn")["lsn"]
            began = time.perf_counter()
            result = history.run_once(grown, retention=retention)
            ended = time.perf_counter()
            if result.dropped or rounds == DROP_ROUNDS:
                break
            time.sleep(1)
        wal = _one(grown, "wal_bytes", since=since)["bytes"]
        time.sleep(window)
    finally:
        stop.set()
        thread.join()
    assert result.dropped == [oldest["name"]], (result, oldest, rounds)
    before = [e for s, e in claims if began - window <= s < began]
    during = [e for s, e in claims if s < ended and s + e > began]
    after = [e for s, e in claims if ended < s <= ended + window]
    return {
        "partition": oldest["name"],
        "rows": oldest["rows"],
        "drop_s": ended - began,
        "rounds": rounds,
        "wal_bytes": wal,
        "before": before,
        "during": during,
        "after": after,
        "timeline": [(s - began, e) for s, e in claims],
    }


def _pooled_ratio(rows: list[dict[str, Any]], label: str, q: float) -> float:
    """The q-quantile of ``label``'s claims over every level / the empty install's (the
    partitions of ``label`` do not change between levels)."""
    pooled = [sample for row in rows for sample in row[label]]
    return ratio(percentile(pooled, q), percentile([s for r in rows for s in r["empty"]], q))


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    slope = (
        sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    )
    return mean_y - slope * mean_x, slope


def _report(
    ctx: Context,
    rows: list[dict[str, Any]],
    retention: dict[str, Any],
    blocks: int,
    per_block: int,
) -> Report:
    report = Report(
        NAME,
        TITLE,
        columns=[
            "history rows",
            "partitions",
            "load s",
            "disk GB",
            "p50 ms",
            "p99 ms",
            "empty p50 ms",
            "empty p99 ms",
            "p50 ratio",
            "p99 ratio",
            "same partitions p99 ms",
            "p99 ratio to same partitions",
            "many partitions p50 ms",
            "many partitions p50 ratio",
            "runs of big job ms",
            "--status FAILED ms",
        ],
    )
    p99_ratios = []
    for row in rows:
        p99 = percentile(row["grown"], 0.99)
        base99 = percentile(row["empty"], 0.99)
        p99_ratios.append(ratio(p99, base99))
        report.add(
            **{
                "history rows": row["rows"],
                "partitions": row["partitions"],
                "load s": row["load_s"],
                "disk GB": row["disk_bytes"] / 1e9,
                "p50 ms": percentile(row["grown"], 0.5) * 1000,
                "p99 ms": p99 * 1000,
                "empty p50 ms": percentile(row["empty"], 0.5) * 1000,
                "empty p99 ms": base99 * 1000,
                "p50 ratio": ratio(percentile(row["grown"], 0.5), percentile(row["empty"], 0.5)),
                "p99 ratio": p99_ratios[-1],
                "same partitions p99 ms": percentile(row["parts"], 0.99) * 1000,
                "p99 ratio to same partitions": ratio(p99, percentile(row["parts"], 0.99)),
                "many partitions p50 ms": percentile(row["many"], 0.5) * 1000,
                "many partitions p50 ratio": ratio(
                    percentile(row["many"], 0.5), percentile(row["empty"], 0.5)
                ),
                "runs of big job ms": percentile(row["listing"], 0.5) * 1000,
                "--status FAILED ms": percentile(row["failed"], 0.5) * 1000,
            }
        )
    largest = rows[-1]
    report.floor(
        f"claim p99 with {largest['rows']:,} history rows / empty p99",
        p99_ratios[-1],
        GOAL,
        higher_is_better=False,
    )
    intercept, slope = _fit([float(r["rows"]) for r in rows], p99_ratios)
    projected = intercept + slope * EXTRAPOLATE_TO
    before99 = percentile(retention["before"], 0.99)
    worst_during = max(retention["during"]) if retention["during"] else float("nan")
    report.floor(
        "slowest claim cycle while a month was dropped / p99 of the cycles before",
        ratio(worst_during, before99),
        GOAL,
        higher_is_better=False,
    )
    load_rate = sum(r["load_s"] for r in rows) / max(largest["rows"], 1) * 1e6
    largest_parts = percentile(largest["parts"], 0.99)
    report.notes += [
        f"partitions apart from rows: {largest['parts_partitions']} empty partitions (the "
        f"grown database's months, without rows) give p99 "
        f"{ratio(largest_parts, percentile(largest['empty'], 0.99)):.2f}x and p50 "
        f"{ratio(percentile(largest['parts'], 0.5), percentile(largest['empty'], 0.5)):.2f}x "
        f"the {rows[0]['partitions']}-partition empty install; the grown one with its rows is "
        f"{ratio(percentile(largest['grown'], 0.99), largest_parts):.2f}x (p99) the "
        "same-partitions one",
        f"partitions alone: {largest['many_partitions']} partitions ({MANY_MONTHS} empty months "
        f"before this one) vs the fresh install's {rows[0]['partitions']}, over all levels' "
        f"claims: p50 {_pooled_ratio(rows, 'many', 0.5):.2f}x, p99 "
        f"{_pooled_ratio(rows, 'many', 0.99):.2f}x",
        f"{DEFINITIONS} definitions, backlog of {BACKLOG} due runs kept level, batch 50; "
        f"{blocks} alternating blocks of {per_block} claims per database and level; history "
        f"spread over {SPAN_DAYS} days at the density of the largest level",
        f"fitted p99 ratio = {intercept:.3f} + {slope * 1e6:.4f} per million rows: "
        f"{projected:.2f} at {EXTRAPOLATE_TO:,} rows (extrapolated)",
        f"generating history (INSERT ... generate_series into each month before it is "
        f"attached, then ANALYZE): "
        f"{load_rate:.1f} s per million rows; disk {largest['disk_bytes'] / 1e9:.1f} GB at "
        f"{largest['rows']:,} rows, so 100M rows would take about "
        f"{largest['disk_bytes'] / max(largest['rows'], 1) * 1e8 / 1e9:.0f} GB and "
        f"{load_rate * 100 / 60:.0f} minutes",
        f"retention: dropped {retention['partition']} ({retention['rows']:,} rows) at the"
        f" history service's round {retention['rounds']} in "
        f"{retention['drop_s'] * 1000:.0f} ms writing {retention['wal_bytes'] / 1024:.0f} KiB "
        f"of WAL (claims' WAL included); {len(retention['during'])} claim cycles (claim, "
        "finish, queue) overlapped it, "
        f"slowest {worst_during * 1000:.1f} ms; p99 before {before99 * 1000:.1f} ms, p99 "
        f"after {percentile(retention['after'], 0.99) * 1000:.1f} ms; slowest in the "
        f"window before {max(retention['before'], default=0) * 1000:.1f} ms; median "
        f"during / median before "
        f"{ratio(percentile(retention['during'], 0.5), percentile(retention['before'], 0.5)):.2f}",
    ]
    report.data = {
        "levels": [
            {
                k: v
                for k, v in r.items()
                if k not in {"empty", "parts", "many", "grown", "listing", "failed"}
            }
            for r in rows
        ],
        "samples_ms": {
            f"{r['rows']}/{label}": [v * 1000 for v in r[label]]
            for r in rows
            for label in ("empty", "parts", "many", "grown")
        },
        "fit": {"intercept": intercept, "slope_per_row": slope, "projected": projected},
        "retention": {k: v for k, v in retention.items() if k != "timeline"},
    }
    if ctx.plots:
        report.plots.append(_plot_growth(ctx, rows, intercept, slope))
        report.plots.append(_plot_drop(ctx, retention))
    return report


def _plot_growth(ctx: Context, rows: list[dict[str, Any]], intercept: float, slope: float) -> str:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [max(r["rows"], 1) / 1e6 for r in rows]
    arms = (
        ("grown", "-o", "with history"),
        ("parts", ":^", "no rows, the same partitions"),
        ("many", "-.v", f"no rows, {MANY_MONTHS} months of partitions"),
        ("empty", "--s", "fresh install"),
    )
    for label, style, legend in arms:
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            left.plot(
                xs,
                [percentile(r[label], q) * 1000 for r in rows],
                style,
                label=f"{name} {legend}",
            )
    left.set_xlabel("history rows (millions)")
    left.set_ylabel("claim latency (ms), batch 50")
    left.set_title("Claim latency vs history")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    ratios = [ratio(percentile(r["grown"], 0.99), percentile(r["empty"], 0.99)) for r in rows]
    right.plot([r["rows"] / 1e6 for r in rows], ratios, "o", label="measured p99 ratio")
    far = EXTRAPOLATE_TO / 1e6
    right.plot(
        [0, far], [intercept, intercept + slope * EXTRAPOLATE_TO], "-", label="fitted, extrapolated"
    )
    right.axhline(GOAL, color="red", linestyle=":", label=f"goal {GOAL}x")
    right.set_xlabel("history rows (millions)")
    right.set_ylabel("p99 with history / p99 empty")
    right.set_title("p99 ratio, fitted to 100M")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    path = plot_path(ctx.out_dir, "history_growth")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _plot_drop(ctx: Context, retention: dict[str, Any]) -> str:
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(8, 3.5))
    axis.plot(
        [t for t, _ in retention["timeline"]],
        [e * 1000 for _, e in retention["timeline"]],
        ".",
        markersize=3,
    )
    axis.axvspan(0, retention["drop_s"], color="orange", alpha=0.4, label="drop of the month")
    axis.set_xlabel("seconds from the drop")
    axis.set_ylabel("claim cycle (ms): claim, finish, queue")
    axis.set_title(
        f"Claim cycles while {retention['partition']} ({retention['rows']:,} rows) is dropped"
    )
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    path = plot_path(ctx.out_dir, "history_retention")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
