"""Materializing 10,000 due definitions.

Every definition has exactly one due occurrence; ``materialize.run_once`` turns each into
a QUEUED run and advances ``next_run_at`` — recurrence evaluated in Python, batches of 500
per transaction, one batch of each kind per round (as per tick), rounds until none is full. The baseline writes the same rows with SQL alone (one INSERT ... SELECT
and one UPDATE, no recurrence arithmetic): what the database itself needs. Each
measurement starts from freshly seeded definitions; rounds rotate the order of the arms.

The headline arm is the benchmark's schedule mix (7 cron in several zones, 2 RRULE, 1
one-shot out of every 10), created 30 days ago. Narrower arms isolate where the time goes:
cron only, and RRULE only created 1 day vs 30 days ago — python-dateutil expands an RRULE
from its DTSTART on every call, so the cost of an RRULE definition grows with its age.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from bench import queries, seed
from bench.context import Context
from bench.report import Report
from bench.stats import median, paired_ratio
from pgsched.db import connection
from pgsched.engine import materialize

NAME = "materialize"
TITLE = "materialization of 10,000 due definitions"


@dataclass(frozen=True)
class Arm:
    label: str
    engine: bool
    count: int
    kinds: tuple[str, ...] = ("cron", "rrule", "once")
    age_days: int = 30


def arms(quick: bool) -> list[Arm]:
    big, small = (300, 100) if quick else (10_000, 1_000)
    return [
        Arm("SQL only (baseline)", False, big),
        Arm("engine, mix", True, big),
        Arm("engine, cron only", True, big, ("cron",)),
        Arm("SQL only (rrule baseline)", False, small),
        Arm("engine, rrule only, 1 day old", True, small, ("rrule",), 1),
        Arm("engine, rrule only, 30 days old", True, small, ("rrule",), 30),
    ]


def run(ctx: Context) -> Report:
    rounds = ctx.rounds_or(3)
    dsn = ctx.env.create_database("materialize")
    chosen = arms(ctx.quick)
    seconds: dict[str, list[float]] = defaultdict(list)
    made: dict[str, list[int]] = defaultdict(list)
    try:
        with connection.connect(dsn) as conn:
            for round_no in range(rounds):
                shift = round_no % len(chosen)
                for arm in chosen[shift:] + chosen[:shift]:
                    conn.execute(queries.get("truncate_definitions"))
                    at = seed.definitions(
                        conn,
                        count=arm.count,
                        cap=1,
                        due=True,
                        kinds=arm.kinds,
                        age=timedelta(days=arm.age_days),
                    )
                    conn.execute(queries.get("vacuum_analyze_all"))
                    started = time.perf_counter()
                    made[arm.label].append(_engine(conn, at) if arm.engine else _sql_only(conn, at))
                    seconds[arm.label].append(time.perf_counter() - started)
                    print(
                        f"  r{round_no} {arm.label:34s} {made[arm.label][-1]:6d} runs in "
                        f"{seconds[arm.label][-1]:.3f}s",
                        flush=True,
                    )
    finally:
        ctx.env.drop_databases()

    rates = {
        label: [rows / secs for rows, secs in zip(made[label], seconds[label], strict=True)]
        for label in seconds
    }
    report = Report(
        NAME,
        TITLE,
        columns=["arm", "definitions", "runs queued", "seconds", "runs/s", "ratio to SQL only"],
    )
    for arm in chosen:
        baseline = chosen[0] if arm.count == chosen[0].count else chosen[3]
        report.add(
            arm=arm.label,
            definitions=arm.count,
            **{
                "runs queued": median(made[arm.label]),
                "seconds": median(seconds[arm.label]),
                "runs/s": median(rates[arm.label]),
                "ratio to SQL only": paired_ratio(rates[arm.label], rates[baseline.label]),
            },
        )
    report.notes.append(
        f"{rounds} rounds, medians; ratios pair each round's engine rate with the same "
        "round's SQL-only rate for the same number of definitions"
    )
    report.data = {"seconds": seconds, "runs": made}
    return report


def _engine(conn: connection.Connection, at: datetime) -> int:
    # Pinned to the seeding instant: exactly one occurrence is due, however long it takes.
    # A round materializes a batch of each kind; the tick goes again while more is due.
    result = materialize.MaterializeResult(more=True)
    while result.more:
        round_ = materialize.run_once(conn, now=at)
        result.add(round_)
        result.more = round_.more
    assert not result.failed_definitions, result.failed_definitions
    assert result.skipped == 0, "every seeded definition has exactly one due occurrence"
    return result.queued


def _sql_only(conn: connection.Connection, at: datetime) -> int:
    with conn.transaction():
        rows = conn.execute(queries.get("materialize_sql_only"), {"now": at}).rowcount
        conn.execute(queries.get("advance_sql_only"), {"now": at})
    return rows
