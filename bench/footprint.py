"""Operator footprint with 10,000 ScheduledJobs, idle and at 20 due a minute.

One operator replica watches a namespace with 10,000 ScheduledJobs (yearly, so idle) and,
in a second window, 20 more that are due every minute. Its resident memory and CPU time
(``/proc/<pid>``) are sampled over each window, next to the same operator watching an
empty namespace in the same run (the baseline).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench import kube
from bench.context import Context
from bench.report import Report
from bench.stats import ratio
from devenv.operators import OperatorProcess
from pgsched.db import connection

NAME = "footprint"
TITLE = "operator RSS and CPU with 10,000 ScheduledJobs, idle and 20 due/min"
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    rss_mib: float
    cpu_percent: float


def measure(process: OperatorProcess, seconds: float) -> Sample:
    """Average CPU over the window (user + system, % of one core) and the RSS at its end."""
    before = cpu_seconds(process.pid)
    time.sleep(seconds)
    used = cpu_seconds(process.pid) - before
    return Sample(rss_mib(process.pid), 100 * used / seconds)


def run(ctx: Context) -> Report:
    # settle: after the ScheduledJobs are stored, and after the due ones are added.
    count, due, window, settle = (
        (300, 5, 5.0, (2, 5)) if ctx.quick else (10_000, 20, 120.0, (10, 30))
    )
    report = Report(
        NAME,
        TITLE,
        columns=[
            "window",
            "RSS MiB",
            "CPU %",
            "baseline RSS MiB",
            "baseline CPU %",
            "RSS ratio",
            "CPU ratio",
        ],
    )
    dsn = ctx.env.create_database("footprint")
    with kube.cluster(ctx) as bench:
        baseline = bench.operator(dsn, name="baseline")
        empty = measure(baseline, window)
        baseline.stop()
        # A quick API budget while thousands of resources are created; the default 20 qps
        # would make the set-up (a create event, a status patch and an Event each) take long.
        operator = bench.operator(dsn, PGSCHED_API_QPS="200", PGSCHED_API_BURST="400")
        try:
            started = time.monotonic()
            bench.apply(
                [kube.scheduled_job(f"idle-{i:05d}", "0 0 1 1 *") for i in range(count)], chunk=500
            )
            kube.wait_for_definitions(dsn, count, timeout=3600)
            settled = time.monotonic() - started
            time.sleep(settle[0])
            idle = measure(operator, window)
            bench.apply(
                [kube.scheduled_job(f"due-{i}", "* * * * *", "sleep 2") for i in range(due)]
            )
            time.sleep(settle[1])
            busy = measure(operator, window)
            with connection.connect(dsn) as conn:
                runs = conn.execute(
                    "SELECT count(*) FILTER (WHERE started_at IS NOT NULL) AS started,"
                    " count(*) FILTER (WHERE status = 'COMPLETED') AS completed"
                    " FROM pgsched.job_runs"
                ).fetchone()
        finally:
            operator.stop()
    ctx.env.drop_databases()
    for label, sample in ((f"{count} idle", idle), (f"{count} idle + {due} due/min", busy)):
        report.add(
            window=label,
            **{
                "RSS MiB": sample.rss_mib,
                "CPU %": sample.cpu_percent,
                "baseline RSS MiB": empty.rss_mib,
                "baseline CPU %": empty.cpu_percent,
                "RSS ratio": ratio(sample.rss_mib, empty.rss_mib),
                "CPU ratio": ratio(sample.cpu_percent, empty.cpu_percent),
            },
        )
    report.notes.append(
        f"windows of {window:g}s; {count} ScheduledJobs accepted in {settled:.0f}s at 200 qps;"
        f" {runs['started']} runs started and {runs['completed']} completed by the end of the busy window; baseline: the same operator with an"
        " empty namespace, measured first in the same run"
    )
    report.data["samples"] = {"empty": vars(empty), "idle": vars(idle), "busy": vars(busy)}
    return report


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
