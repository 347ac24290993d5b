"""What the per-definition locks cost a claim.

The same claim transaction (``dispatch.claim``) with its sorted lock per definition (a
row of ``pgsched.claim_locks``; ``pg_advisory_xact_lock`` in older releases),
and without them
(``bench/planted.py``: a copy of the claim function minus its locks, created in the
benchmark's database, the planted bug of the chaos self-test), on the same data: runs
spread over 1, 10 or 1,000 definitions, 1 or 4 workers, batch 1 or 50. Each worker completes its batch right after claiming (one statement), so
RUNNING counts stay small whatever the number of definitions; caps never bind.

A claim locks the definitions of the first ``batch`` candidates (and tries those of the
further ones only if caps leave the batch short), so with 1,000 definitions a batch of 50
takes ~50 locks; dispatchers whose batches share a definition queue behind each other until
the first commits. The table shows the throughput ratio, the wall-clock cost per claimed
run in microseconds (``1/locked - 1/unlocked``: it includes waiting for another dispatcher's locks) and the
CPU cost per claimed run (worker + backend CPU, locked minus unlocked: the work of taking
the locks, hardly affected by other load on the machine).
"""

from __future__ import annotations

from bench import planted, queries, seed
from bench.claiming import MIN_QUEUE, QUICK_MIN_QUEUE, Arm, Series
from bench.context import Context
from bench.report import Report, plot_path, pyplot
from bench.stats import median
from bench.workers import Crew
from pgsched.db import connection
from pgsched.engine import dispatch

NAME = "locks"
TITLE = "claim-lock cost per claim with 1, 10, 1,000 definitions"
UNCAPPED = 100_000
LOCKED = Arm("locked", "claim", complete="bulk")
UNLOCKED = Arm("unlocked", "claim", complete="bulk", unlocked=True)


def run(ctx: Context) -> Report:
    rounds = ctx.rounds_or(3)
    definition_counts = (1, 1_000) if ctx.quick else (1, 10, 1_000)
    worker_counts = (2,) if ctx.quick else (1, 4)
    batches = (50,) if ctx.quick else (1, 50)
    dsn = ctx.env.create_database("locks")
    locks_per_call: dict[tuple[int, int], float] = {}
    with connection.connect(dsn) as conn, Crew(max(worker_counts)) as crew:
        planted.install_unlocked_claim(conn)
        series = Series(
            crew, conn, dsn, ctx.seconds, min_queue=QUICK_MIN_QUEUE if ctx.quick else MIN_QUEUE
        )
        for round_no in range(rounds):
            for count in definition_counts:
                conn.execute(queries.get("truncate_definitions"))
                seed.definitions(conn, count=count, cap=UNCAPPED, due=False)
                for batch in batches:
                    if round_no == 0:
                        locks_per_call[(count, batch)] = _locks_per_claim(conn, batch)
                    for workers in worker_counts:
                        series.cell(
                            (count, workers, batch),
                            [LOCKED, UNLOCKED],
                            workers=workers,
                            batch=batch,
                            round_no=round_no,
                        )
    ctx.env.drop_databases()

    report = Report(
        NAME,
        TITLE,
        columns=[
            "definitions",
            "workers",
            "batch",
            "locks per claim call",
            "locked claims/s",
            "unlocked claims/s",
            "locked / unlocked",
            "lock cost us per run",
            "locked CPU us/claim",
            "unlocked CPU us/claim",
            "CPU cost us per run",
        ],
    )
    for count in definition_counts:
        for workers in worker_counts:
            for batch in batches:
                cell = (count, workers, batch)
                locked = series.rates[(cell, "locked")]
                unlocked = series.rates[(cell, "unlocked")]
                costs = [1e6 / a - 1e6 / b for a, b in zip(locked, unlocked, strict=True)]
                report.add(
                    definitions=count,
                    workers=workers,
                    batch=batch,
                    **{
                        "locks per claim call": locks_per_call[(count, batch)],
                        "locked claims/s": median(locked),
                        "unlocked claims/s": median(unlocked),
                        "locked / unlocked": series.ratio(cell, "locked", "unlocked"),
                        "lock cost us per run": median(costs),
                        "locked CPU us/claim": series.cpu_median(cell, "locked"),
                        "unlocked CPU us/claim": series.cpu_median(cell, "unlocked"),
                        "CPU cost us per run": median(
                            [
                                a - b
                                for a, b in zip(
                                    series.cpu[(cell, "locked")],
                                    series.cpu[(cell, "unlocked")],
                                    strict=True,
                                )
                            ]
                        ),
                    },
                )
    report.notes.append(
        f"dispatch.claim + one-statement completion, caps {UNCAPPED} (never bind); {rounds} "
        f"rounds x {ctx.seconds:g}s; medians; ratio = median of per-round ratios; locks per "
        "call = claim_locks rows one claim on a full queue holds at its commit"
    )
    report.notes += series.lost_notes()
    report.data = {
        "rates": {str(key): value for key, value in series.rates.items()},
        "cpu_us_per_claim": {str(key): value for key, value in series.cpu.items()},
    }
    if ctx.plots:
        report.plots.append(_plot(ctx, series, definition_counts, worker_counts, batches))
    return report


def _locks_per_claim(conn: connection.Connection, batch: int) -> float:
    """How many claim locks one claim on a full queue holds when it commits."""
    seed.fresh_queue(conn, 4_000)
    with conn.transaction(force_rollback=True):
        dispatch.claim(conn, batch_size=batch)
        row = conn.execute(queries.get("claim_locks_held")).fetchone()
    assert row is not None
    return float(row["n"])


def _plot(
    ctx: Context,
    series: Series,
    definition_counts: tuple[int, ...],
    worker_counts: tuple[int, ...],
    batches: tuple[int, ...],
) -> str:
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(7, 4))
    for workers in worker_counts:
        for batch in batches:
            axis.plot(
                definition_counts,
                [
                    series.ratio((c, workers, batch), "locked", "unlocked")
                    for c in definition_counts
                ],
                marker="o",
                label=f"{workers} worker(s), batch {batch}",
            )
    axis.set_xscale("log")
    axis.set_xticks(definition_counts, [str(c) for c in definition_counts])
    axis.set_xlabel("definitions the queued runs belong to")
    axis.set_ylabel("claims/s with locks / without")
    axis.set_ylim(0, 1.2)
    axis.axhline(1.0, color="grey", linewidth=1)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title("Per-definition claim locks: throughput kept")
    fig.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
