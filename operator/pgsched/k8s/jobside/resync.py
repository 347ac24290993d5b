"""Resync: catch Job outcomes the watch missed.

The outcome watch (``jobevents``) records a run's end when its Job finishes or
disappears, and retries while the database or the API server is down. What it cannot see is
a Job deleted while no operator was watching: there is no object left to list, and no event.
Without a resync such a run would stay RUNNING until its heartbeats stop and the reaper
calls it ``HeartbeatLost`` — the wrong reason, and late.

So, every ``interval`` seconds, one replica (a try-lock, never waiting) compares RUNNING
runs older than ``min_age`` with their Jobs: a finished Job's outcome is recorded, a
missing Job makes the run ``JobDeleted`` (or ``CANCELLED`` if cancellation was requested).
The same fenced ``outcomes.record`` as the watch, so racing it is harmless.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.k8s import names
from pgsched.k8s.client import api, reads
from pgsched.k8s.jobside import outcomes
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


@dataclass
class ResyncResult:
    checked: int = 0
    recorded: dict[int, str] = field(default_factory=dict)
    skipped: bool = False  # another replica holds the resync lock


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    *,
    min_age_seconds: float = 30,
    limit: int = 500,
    now: datetime | None = None,
) -> ResyncResult:
    result = ResyncResult()
    locked = conn.execute(queries.get("try_resync_lock")).fetchone()
    if not locked or not locked["locked"]:
        result.skipped = True
        return result
    try:
        rows = conn.execute(
            queries.get("running_runs_with_jobs"),
            {"min_age_seconds": min_age_seconds, "limit": limit, "now": now},
        ).fetchall()
        # After a stampede a namespace holds thousands of other Jobs: only these runs' are read.
        for row, jobs, pods in reads.jobs_of_rows(kube, rows):
            _resync_run(conn, kube, row, jobs.get(row["k8s_job_name"]), pods, result)
        result.checked = len(rows)
    finally:
        conn.execute(queries.get("release_resync_lock"))
    return result


def _resync_run(
    conn: Connection,
    kube: api.KubeApi,
    row: Obj,
    job: Obj | None,
    pods: dict[str, list[Obj]],
    result: ResyncResult,
) -> None:
    if job is not None and not outcomes.finished(job):
        return
    namespace = row["namespace"]
    log_run = logs.for_labels(
        log, run_id=row["id"], namespace=namespace, name=row["name"], attempt=row["attempt"]
    )
    found: list[Obj] = pods.get(row["k8s_job_name"], []) if job is not None else []
    outcome = outcomes.record(
        conn,
        row["id"],
        names.lease_fingerprint(str(row["lease_token"])),
        job=job or {},
        pods=functools.partial(list, found),
        deleted=job is None,
        namespace_ending=lambda: reads.namespace_ending(
            kube, namespace, created=((job or {}).get("metadata") or {}).get("creationTimestamp")
        ),
        logger=log_run,
    )
    if outcome is not None:
        result.recorded[row["id"]] = outcome.status
        log_run.warning(
            "run %s: the outcome watch missed Job %s/%s; resync recorded %s %s",
            row["id"],
            namespace,
            row["k8s_job_name"],
            outcome.status,
            outcome.reason or "",
        )
