"""After a failover: every run the lost WAL could have touched, compared with its Job.

With asynchronous replication a failover loses the commits the standby had not received
(docs/operations.md, "What a failover can lose"); the API server kept what the database
lost: a Job that finished, and the lease its pod was started with. So once per new WAL
timeline one replica walks the runs created before it, a batch at a time, and asks their
Jobs at once instead of waiting for each run's own timer: a lost end is recorded, a lost
claim whose lease the database finds genuine is re-established, a launched run whose Job is
gone ends ``OutcomeUnknown``. The pass is recorded in ``pgsched.timeline_revalidations`` and
never repeated; its last step restores the runs whose rows were lost entirely
(``k8s.failover.restoration``). The tick's dispatcher waits for it.

The cases, the batches and why restoring comes last: docs/architecture.md,
"Revalidation after a failover".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from pgsched import logs
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import lease
from pgsched.k8s import names
from pgsched.k8s.client import api, reads
from pgsched.k8s.failover import restoration
from pgsched.k8s.jobside import launcher, outcomes, verdicts
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

# How long one replica holds the pass for a batch (its API lists and fenced writes take
# well under a second per 100 runs on a healthy API server).
HOLD_SECONDS = 60.0

# How long the tick's dispatcher waits on a new timeline for its pass before claiming
# anyway (engine/tick.py): the pass takes seconds with the API server up; while the API
# server is away no Job could be launched anyway. Past it, a lost run's duplicate can run.
DISPATCH_WAIT_SECONDS = 300.0


@dataclass
class Hold:
    """The pass this replica holds, remembered from one round to the next. A round that
    fails on the database after its claim (the session gone mid-batch: the primary
    restarting, the very failover the pass follows) cannot release the hold, and nobody
    could take the pass before ``HOLD_SECONDS``: a failover's runs then waited a minute for
    their pass, with dispatch waiting on it. The next round of the same replica releases
    its own hold first, fenced on the hold's ``claimed_until``."""

    timeline: int | None = None
    claimed_until: datetime | None = None

    def took(self, timeline: int, claimed_until: datetime) -> None:
        self.timeline, self.claimed_until = timeline, claimed_until

    def released(self) -> None:
        self.timeline = self.claimed_until = None

    def release_left_over(self, conn: Connection) -> None:
        if self.timeline is not None:
            conn.execute(
                queries.get("release_revalidation"),
                {"timeline": self.timeline, "claimed_until": self.claimed_until},
            )
            self.released()


@dataclass
class RevalidationResult:
    timeline: int | None = None  # the timeline whose pass this round worked on, if any
    compared: int = 0
    recorded: dict[int, str] = field(default_factory=dict)  # run id → reason (or status)
    reestablished: list[int] = field(default_factory=list)
    restored: list[restoration.Restored] = field(default_factory=list)  # lost rows tried
    finished: bool = False  # this round finished the pass

    @property
    def more(self) -> bool:
        """The pass goes on: the next batch at once."""
        return self.timeline is not None and not self.finished


def run_once(
    conn: Connection,
    kube: api.KubeApi,
    *,
    hold: Hold | None = None,
    limit: int = 500,
    now: datetime | None = None,
) -> RevalidationResult:
    """One batch of the current timeline's pass, if one is owed and no other replica holds
    it; an unreachable API raises ``api.ApiError`` (the batch is done again later). ``hold``
    (a replica's, kept across its rounds): a hold an earlier round left is released first."""
    result = RevalidationResult()
    hold = hold or Hold()
    hold.release_left_over(conn)
    claimed = conn.execute(
        queries.get("claim_revalidation"), {"hold_seconds": HOLD_SECONDS, "now": now}
    ).fetchone()
    if claimed is None:
        return result
    result.timeline = int(claimed["timeline"])
    hold.took(result.timeline, claimed["claimed_until"])
    try:
        rows = _batch(conn, claimed["after_id"], limit=limit, now=now, timeline=result.timeline)
        _compare_all(conn, kube, rows, result)
        if len(rows) < limit:
            # Last, with every lost end recorded (so the places under the caps that those
            # runs held are free): rows lost entirely come back RUNNING, and are compared
            # with their Jobs in turn. Restored first, they would overlap for a moment
            # with a run of theirs whose end was lost (2 RUNNING under a cap of 1).
            result.restored = restoration.run_once(conn, kube, last_id=claimed["last_id"])
            back = [item.run_id for item in result.restored if item.outcome == "restored"]
            if back:
                restored_rows = conn.execute(
                    queries.get("runs_to_revalidate"),
                    {"after_id": 0, "limit": len(back), "now": now, "ids": back},
                ).fetchall()
                _compare_all(conn, kube, restored_rows, result)
    except api.ApiError:
        # Released, the cursor where it was: this replica or another does the batch again
        # once the API answers, not only after the hold.
        _advance(conn, result.timeline, claimed["after_id"], [], finished=False, now=now)
        hold.released()
        raise
    result.compared = len(rows)
    result.finished = len(rows) < limit
    _advance(conn, result.timeline, claimed["after_id"], rows, finished=result.finished, now=now)
    hold.released()
    if result.finished:
        log.info(
            "WAL timeline %s: every run from before it compared with its Job (%s outcomes"
            " recorded, %s claims re-established in this last batch)",
            result.timeline,
            len(result.recorded),
            len(result.reestablished),
        )
    return result


def _compare_all(
    conn: Connection, kube: api.KubeApi, rows: list[Obj], result: RevalidationResult
) -> None:
    # Ends first: a run whose end was lost holds the slot a lost claim of the same
    # definition needs to be re-established (stable: by id within each kind).
    for row, job, pods in sorted(
        _with_jobs(kube, rows), key=lambda found: found[0]["status"] != "RUNNING"
    ):
        _compare(conn, kube, row, job, pods, result)


def _batch(
    conn: Connection, after_id: int, *, limit: int, now: datetime | None, timeline: int
) -> list[Obj]:
    """The runs to compare after ``after_id``; the first batch says why in the log."""
    rows = conn.execute(
        queries.get("runs_to_revalidate"),
        {"after_id": after_id, "limit": limit, "now": now, "ids": None},
    ).fetchall()
    if after_id == 0 and rows:
        log.warning(
            "WAL timeline %s: a failover (or restore) happened; comparing %s runs from before"
            " it with their Jobs (with asynchronous replication its last commits may be lost,"
            " see docs/operations.md, What a failover can lose)",
            timeline,
            f"{len(rows)}+" if len(rows) == limit else len(rows),
        )
    return rows


def _advance(
    conn: Connection,
    timeline: int,
    from_id: int,
    rows: list[Obj],
    *,
    finished: bool,
    now: datetime | None,
) -> None:
    """Move the pass's cursor past ``rows`` (none: leave it) and release the hold."""
    conn.execute(
        queries.get("advance_revalidation"),
        {
            "timeline": timeline,
            "from_id": from_id,
            "after_id": rows[-1]["id"] if rows else from_id,
            "compared": len(rows),
            "finished": finished,
            "now": now,
        },
    )


def _with_jobs(kube: api.KubeApi, rows: list[Obj]) -> Iterator[tuple[Obj, Obj | None, list[Obj]]]:
    """Each run that has a Job (by its recorded name, else the deterministic one), with the
    Job and its pods, and each RUNNING run whose recorded Job is gone (None)."""
    for row, jobs, pods in reads.jobs_of_rows(kube, rows):
        job = jobs.get(row["k8s_job_name"] or names.job_name(row["name"], row["id"]))
        if job is not None:
            yield row, job, pods.get(job["metadata"]["name"], [])
        elif row["status"] == "RUNNING" and row["k8s_job_name"] is not None:
            yield row, None, []


def _compare(
    conn: Connection,
    kube: api.KubeApi,
    row: Obj,
    job: Obj | None,
    pods: list[Obj],
    result: RevalidationResult,
) -> None:
    run_log = logs.for_labels(
        log, run_id=row["id"], namespace=row["namespace"], name=row["name"], attempt=row["attempt"]
    )
    if job is None:
        # Launched, its Job gone: perhaps cleaned up after a lost end (the docstring).
        outcome = verdicts.decide(row, None, []).outcome
        assert outcome is not None
        run_lease = lease.Lease(row["id"], row["lease_token"])
        recorded = outcome if outcomes.write(conn, run_lease, outcome, logger=run_log) else None
        said = "its Job is gone"
    else:
        where = f"{row['namespace']}/{job['metadata']['name']}"
        if (job["metadata"].get("labels") or {}).get(names.LABEL_RUN_ID) != str(row["id"]):
            return
        if row["status"] == "QUEUED" and not _take_back_claim(
            conn, kube, row, job, result, run_log
        ):
            return
        if not outcomes.finished(job):
            return
        recorded = outcomes.record(
            conn,
            row["id"],
            str(names.job_lease_fingerprint(job["metadata"].get("annotations"))),
            job=job,
            pods=functools.partial(list, pods),
            deleted=False,
            namespace_ending=lambda: reads.namespace_ending(
                kube, row["namespace"], created=job["metadata"].get("creationTimestamp")
            ),
            logger=run_log,
        )
        said = f"Job {where} says"
    if recorded is not None:
        result.recorded[row["id"]] = recorded.reason or recorded.status
        run_log.warning(
            "run %s: its end may have been lost with the database's last commits; %s %s %s",
            row["id"],
            said,
            recorded.status,
            recorded.reason or "",
        )


def _take_back_claim(
    conn: Connection,
    kube: api.KubeApi,
    row: Obj,
    job: Obj,
    result: RevalidationResult,
    run_log: logging.Logger | logs.ContextAdapter,
) -> bool:
    """Re-establish the lost claim of a QUEUED run whose Job holds a genuine lease of it,
    and record the Job as its launch; False if the lease is not genuine, or no room."""
    held = launcher.held_lease(kube, job)
    if held is None or not lease.reestablish(conn, lease.Lease(row["id"], held)):
        return False
    conn.execute(
        queries.get("record_launches"),
        {"ids": [row["id"]], "lease_tokens": [held], "handles": [job["metadata"]["name"]]},
    )
    result.reestablished.append(row["id"])
    run_log.warning(
        "run %s: its claim was lost with the database's last commits; Job %s/%s holds a"
        " genuine lease of it, so the run is RUNNING under that lease again",
        row["id"],
        row["namespace"],
        job["metadata"]["name"],
    )
    return True
