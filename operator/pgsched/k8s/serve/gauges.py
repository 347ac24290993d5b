"""Gauges read from the database: the queue depth and failure streaks.

Every replica exports them (each scrape sees the same values whichever replica answers),
refreshed every ``PGSCHED_GAUGE_INTERVAL_SECONDS``. Counters and histograms are different:
the publisher counts each run status change once, on the replica that published it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pgsched import metrics
from pgsched.db import queries
from pgsched.db.connection import Connection


@dataclass
class GaugeResult:
    namespaces: int = 0  # namespaces with due runs
    streaks: int = 0  # ScheduledJobs with a failure streak


def run_once(conn: Connection, *, now: datetime | None = None) -> GaugeResult:
    due = conn.execute(queries.get("queue_depth"), {"now": now})
    depth = {row["namespace"]: row["due"] for row in due}
    streaks = conn.execute(queries.get("failure_streaks")).fetchall()
    metrics.QUEUE_DEPTH.clear()
    for namespace, due in depth.items():
        metrics.QUEUE_DEPTH.labels(namespace).set(due)
    metrics.FAILURE_STREAK.clear()
    metrics.AUTO_SUSPENDED.clear()
    for row in streaks:
        metrics.FAILURE_STREAK.labels(row["namespace"], row["name"]).set(
            row["consecutive_failures"]
        )
        if row["auto_suspended"]:
            metrics.AUTO_SUSPENDED.labels(row["namespace"], row["name"]).set(1)
    return GaugeResult(namespaces=len(depth), streaks=len(streaks))
