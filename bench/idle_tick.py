"""An idle tick with 100,000 definitions, none due (issue 2 #3).

A whole ``Ticker.run_once`` — leader election, materialize (two kinds), reap, settle,
dispatch, release — on its own session, exactly as every replica runs it once a second
whether or not anything is due. The baseline is the same tick on a database with no
definitions at all, on the same server, ticks alternating between the two, so the ratio
is what 100,000 idle definitions (and 100,000 finished runs of history) cost a tick.
"""

from __future__ import annotations

from collections import defaultdict

from bench import queries, seed
from bench.context import Context
from bench.report import Report
from bench.stats import median, percentile, ratio
from pgsched.db import connection
from pgsched.engine import launcher
from pgsched.engine.tick import Ticker, TickSettings

NAME = "idle_tick"
TITLE = "idle tick with 100k definitions, none due (issue 2 #3)"
FLOOR_MS = 20.0
PHASES = ("tick", "materialize", "reap", "settle", "dispatch")


def run(ctx: Context) -> Report:
    count = 2_000 if ctx.quick else 100_000
    ticks = 20 if ctx.quick else 300
    big = f"{count // 1000}k definitions"
    dsns = {"no definitions": ctx.env.create_database("tick"), big: ctx.env.create_database("tick")}
    with connection.connect(dsns[big]) as conn:
        seed.definitions(conn, count=count, cap=1, due=False)
        seed.history(conn, count)
        conn.execute(queries.get("vacuum_analyze_all"))
    tickers = {
        label: Ticker(
            lambda dsn=dsn: connection.connect(dsn), launcher.NullLauncher(), TickSettings()
        )
        for label, dsn in dsns.items()
    }
    durations: dict[tuple[str, str], list[float]] = defaultdict(list)
    busy = 0  # ticks that found something to do: the benchmark would not be idle
    try:
        for label in tickers:
            for _ in range(5):  # warm up: connect, plan caches
                tickers[label].run_once()
        for index in range(ticks):
            order = list(tickers) if index % 2 == 0 else list(reversed(tickers))
            for label in order:
                result = tickers[label].run_once()
                assert result.leader and result.error is None, result.error
                if result.materialized and result.materialized.definitions:
                    busy += 1
                for phase in PHASES:
                    durations[(label, phase)].append(result.durations[phase] * 1000)
    finally:
        for ticker in tickers.values():
            ticker.close()
        ctx.env.drop_databases()

    report = Report(
        NAME,
        TITLE,
        columns=["phase", "ticks", f"{big} median ms", "p99 ms", "empty median ms", "ratio"],
    )
    for phase in PHASES:
        values = durations[(big, phase)]
        base = durations[("no definitions", phase)]
        report.add(
            phase=phase,
            ticks=len(values),
            **{
                f"{big} median ms": median(values),
                "p99 ms": percentile(values, 0.99),
                "empty median ms": median(base),
                "ratio": ratio(median(values), median(base)),
            },
        )
    report.floor(
        f"idle tick median ms with {big}",
        median(durations[(big, "tick")]),
        FLOOR_MS,
        higher_is_better=False,
    )
    report.notes.append(
        f"{ticks} ticks per database, alternating; 'tick' includes leader election and release; "
        f"baseline = the same tick with no definitions; {busy} ticks materialized something"
    )
    report.data = {"durations_ms": {f"{k[0]}/{k[1]}": v for k, v in durations.items()}}
    return report
