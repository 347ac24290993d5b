"""Claim throughput: the seed's raw SKIP LOCKED query vs pgsched's dispatcher.

Same database, same 1,000 definitions, same freshly queued runs for every measurement.

- *uncapped*: caps of 100,000 per definition — far above any definition's queued runs,
  so the cap check runs in full (advisory locks, live RUNNING counts) but never decides
  what is claimed. Claim only, nothing completes: what the seed's query measures.
- *capped*: every definition capped at 1, and each worker completes its batch right after
  claiming it (one statement, both arms), so slots free up and the caps really bind:
  the dispatcher passes over candidates whose definition is running elsewhere.

- *pooled*: as uncapped, with the 1,000 definitions in 10 concurrency pools whose limits
  never bind either (100,000): the claim also waits for the pools' locks, sorted with the
  definitions', and counts each pool's RUNNING runs — the cost of pools, as a ratio to raw
  SKIP LOCKED measured in the same cell.

``dispatcher`` is ``dispatch.run_once`` with a no-op launcher (what a tick runs);
``dispatcher, try locks`` the same with ``try_locks=True`` (definitions another worker is
claiming are skipped, not waited for: for several concurrent dispatchers). Both claim with
one call of ``pgsched.claim_for_dispatch``.
"""

from __future__ import annotations

from bench import seed
from bench.claiming import MIN_QUEUE, QUICK_MIN_QUEUE, Arm, Series
from bench.context import Context
from bench.report import Report
from bench.workers import Crew
from pgsched.db import connection

NAME = "throughput"
TITLE = "claim throughput, raw SKIP LOCKED vs dispatcher"
DEFINITIONS = 1_000
UNCAPPED = 100_000
CAPPED = 1
POOLS = 10
FLOOR = 0.25  # the floor (bench/README.md, "Floors at a glance")
GOAL = 0.5  # the goal: one dispatcher at batch 50

RAW = Arm("raw", "raw")
DISPATCHER = Arm("dispatcher", "dispatch")
TRY_LOCKS = Arm("dispatcher, try locks", "dispatch", try_locks=True)
RAW_COMPLETING = Arm("raw", "raw", complete="bulk")
DISPATCHER_COMPLETING = Arm("dispatcher", "dispatch", complete="bulk")
TRY_LOCKS_COMPLETING = Arm("dispatcher, try locks", "dispatch", complete="bulk", try_locks=True)


def run(ctx: Context) -> Report:
    rounds = ctx.rounds_or(3)
    batches = (50,) if ctx.quick else (1, 10, 50)
    worker_counts = (2,) if ctx.quick else (1, 4)
    capped_workers = max(worker_counts)
    dsn = ctx.env.create_database("throughput")
    with connection.connect(dsn) as conn, Crew(max(worker_counts)) as crew:
        series = Series(
            crew, conn, dsn, ctx.seconds, min_queue=QUICK_MIN_QUEUE if ctx.quick else MIN_QUEUE
        )
        seed.definitions(conn, count=DEFINITIONS, cap=UNCAPPED, due=False)
        for round_no in range(rounds):
            for batch in batches:
                for workers in worker_counts:
                    series.cell(
                        ("uncapped", workers, batch),
                        [RAW, DISPATCHER, TRY_LOCKS],
                        workers=workers,
                        batch=batch,
                        round_no=round_no,
                    )
            seed.set_pools(conn, POOLS, UNCAPPED)
            for batch in batches:
                series.cell(
                    ("pooled", capped_workers, batch),
                    [RAW, DISPATCHER],
                    workers=capped_workers,
                    batch=batch,
                    round_no=round_no,
                )
            seed.set_pools(conn, 0, UNCAPPED)
            seed.set_caps(conn, CAPPED)
            for batch in batches:
                series.cell(
                    ("capped", capped_workers, batch),
                    [
                        RAW_COMPLETING,
                        DISPATCHER_COMPLETING,
                        TRY_LOCKS_COMPLETING,
                    ],
                    workers=capped_workers,
                    batch=batch,
                    round_no=round_no,
                )
            seed.set_caps(conn, UNCAPPED)
    ctx.env.drop_databases()

    report = Report(
        NAME,
        TITLE,
        columns=[
            "variant",
            "workers",
            "batch",
            "arm",
            "claims/s",
            "ratio to raw",
            "CPU us/claim",
            "CPU ratio",
            "at-cap passes",
        ],
    )
    cells = [("uncapped", w, b) for w in worker_counts for b in batches]
    cells += [("pooled", capped_workers, b) for b in batches]
    cells += [("capped", capped_workers, b) for b in batches]
    for cell in cells:
        variant, workers, batch = cell
        for arm in ("raw", "dispatcher", "dispatcher, try locks"):
            if not series.rates[(cell, arm)]:
                continue
            report.add(
                variant={"uncapped": "uncapped", "pooled": f"{POOLS} pools"}.get(
                    variant, f"cap {CAPPED} + complete"
                ),
                workers=workers,
                batch=batch,
                arm=arm,
                **{
                    "claims/s": series.median(cell, arm),
                    "ratio to raw": series.ratio(cell, arm, "raw"),
                    "CPU us/claim": series.cpu_median(cell, arm),
                    "CPU ratio": series.cpu_ratio(cell, arm, "raw"),
                    "at-cap passes": series.at_cap[(cell, arm)] if variant == "capped" else None,
                },
            )
    for workers in worker_counts:
        cell = ("uncapped", workers, max(batches))
        report.floor(
            f"dispatcher / raw at batch {max(batches)}, {workers} worker(s)",
            series.ratio(cell, "dispatcher", "raw"),
            FLOOR,
        )
        if workers == 1:
            report.floor(
                f"dispatcher / raw at batch {max(batches)}, 1 worker (goal)",
                series.ratio(cell, "dispatcher", "raw"),
                GOAL,
            )
        report.floor(
            f"dispatcher, try locks / raw at batch {max(batches)}, {workers} worker(s)",
            series.ratio(cell, "dispatcher, try locks", "raw"),
            FLOOR,
        )
    report.notes.append(
        f"{DEFINITIONS} definitions; pooled = the same in {POOLS} pools of limit {UNCAPPED}; uncapped = max_concurrent_runs {UNCAPPED} (never binds); "
        f"capped = {CAPPED}, each batch completed right after its claim (one statement, every "
        f"arm); {rounds} rounds x {ctx.seconds:g}s windows; claims/s and CPU are medians of "
        "rounds, ratios medians of per-round ratios; CPU = worker process + its backend, and "
        "CPU ratio = raw's CPU per claim / the arm's (claims per CPU-second, relative)"
    )
    report.notes += series.lost_notes()
    report.data = {
        "rates": {str(key): value for key, value in series.rates.items()},
        "cpu_us_per_claim": {str(key): value for key, value in series.cpu.items()},
    }
    return report
