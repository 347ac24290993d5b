"""The publisher: run status changes become what users see in Kubernetes.

It drains the ``pgsched.run_events`` outbox (filled by triggers on every run status
change, wherever it happened) in batches claimed with ``FOR UPDATE SKIP LOCKED``, so every
replica can publish and each change is published by one of them. For each batch:

- a Kubernetes Event per change users care about (started, succeeded, failed with its
  reason, retried, cancelled, skipped), named deterministically so a batch published twice
  after a crash posts each Event once (409 is success);
- one status patch per ScheduledJob touched (``lastRun``, ``active``, ``nextRuns``, ...),
  plus an Event when a condition flips (auto-suspension);
- Job cleanup for ScheduledJobs whose runs ended: Jobs of runs the engine ended (reaped,
  cancel grace expired) are deleted, finished Jobs beyond the history limits too;
- run metrics (``pgsched_runs_total``, skew and duration histograms), and every few
  seconds the gauges read from the database (queue depth, failure streaks).

The outbox rows are deleted in the same transaction, after the API calls succeeded; an
API failure rolls the batch back and it is published again later (at least once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg

from pgsched import logs, metrics
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.db.session import Session
from pgsched.engine import definitions, pools, runs
from pgsched.engine.models import TERMINAL_STATUSES, Definition
from pgsched.failures import FailureLog
from pgsched.k8s import api, names, resync, status, verdicts
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


_EVENTS: dict[str, tuple[str, str]] = {
    "RUNNING": ("Normal", "RunStarted"),
    "COMPLETED": ("Normal", "RunSucceeded"),
    "FAILED": ("Warning", "RunFailed"),
    "CANCELLED": ("Normal", "RunCancelled"),
    "SKIPPED": ("Warning", "RunSkipped"),
}
# Not a run status: settle's note that a definition was suspended automatically.
AUTO_SUSPENDED = "AUTO_SUSPENDED"
# How often the verdicts of silent runs are asked of the API (a query on a tiny partial
# index when none is pending, so it may be frequent: a verdict is late by at most this).
VERDICT_INTERVAL_SECONDS = 2.0


@dataclass
class PublishResult:
    events: int = 0
    statuses: int = 0
    jobs_deleted: int = 0
    definitions: set[UUID] = field(default_factory=set)


class Publisher:
    def __init__(self, kube: api.KubeApi, *, batch_size: int = 200) -> None:
        self._kube = kube
        self._batch_size = batch_size
        # The pool statuses this replica last wrote: a pool's status is patched on change.
        self._pool_status: dict[tuple[str, str], Obj] = {}

    def run_once(self, conn: Connection) -> PublishResult:
        result = PublishResult()
        with conn.transaction():
            rows = conn.execute(
                queries.get("claim_run_events"), {"limit": self._batch_size}
            ).fetchall()
            if not rows:
                return result
            by_definition: dict[UUID, list[Obj]] = defaultdict(list)
            for row in rows:
                by_definition[row["definition_id"]].append(row)
                if row["status"] == AUTO_SUSPENDED:
                    continue  # only the status refresh below; its Event comes from there
                _count(row)
                if self._post_run_event(row):
                    result.events += 1
            for definition_id, changes in by_definition.items():
                self._refresh(conn, definition_id, changes, result)
            conn.execute(queries.get("delete_run_events"), {"ids": [row["id"] for row in rows]})
        result.definitions = set(by_definition)
        return result

    def update_gauges(self, conn: Connection) -> None:
        """Gauges read from the database: the queue depth and failure streaks."""
        depth = {row["namespace"]: row["due"] for row in conn.execute(queries.get("queue_depth"))}
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
        self.update_pools(conn)

    def update_pools(self, conn: Connection) -> None:
        """Each pool's gauges, and its status (running, queued, jobs) where it changed."""
        for gauge in (metrics.POOL_LIMIT, metrics.POOL_RUNNING, metrics.POOL_QUEUED):
            gauge.clear()
        for pool in pools.stats(conn):
            metrics.POOL_RUNNING.labels(pool.namespace, pool.name).set(pool.running)
            metrics.POOL_QUEUED.labels(pool.namespace, pool.name).set(pool.queued)
            if pool.limit is None:
                continue  # named by jobs, but there is no resource to write to
            metrics.POOL_LIMIT.labels(pool.namespace, pool.name).set(pool.limit)
            new = {"running": pool.running, "queued": pool.queued, "jobs": pool.jobs}
            key = (pool.namespace, pool.name)
            if self._pool_status.get(key) == new:
                continue
            try:
                self._kube.merge_patch(
                    api.pool_path(pool.namespace, pool.name, subresource="status"),
                    {"status": new},
                )
            except api.ApiError as error:
                if not error.not_found:
                    raise
                continue  # deleted since; its delete handler forgets it
            self._pool_status[key] = new

    def run_forever(
        self,
        connect: Callable[[], Connection],
        stop: threading.Event,
        *,
        interval: float = 0.5,
        resync_every: float = 30.0,
    ) -> None:
        """Publish until ``stop``; errors are logged and retried, never fatal. Every few
        seconds also refresh the queue-depth gauge, ask the API for the verdicts of silent
        runs (``verdicts``), and every ``resync_every`` seconds catch Job outcomes the
        watch missed (``resync``)."""
        session = Session(connect)
        last_depth = last_resync = last_verdicts = time.monotonic()
        failures = FailureLog(log, "publishing run events")
        while not stop.is_set():
            try:
                conn = session.connection()
                published = self.run_once(conn)
                if time.monotonic() - last_depth > 5:
                    self.update_gauges(conn)
                    last_depth = time.monotonic()
                if time.monotonic() - last_verdicts > VERDICT_INTERVAL_SECONDS:
                    last_verdicts = time.monotonic()
                    verdicts.run_once(conn, self._kube)
                if time.monotonic() - last_resync > resync_every:
                    resync.run_once(conn, self._kube)
                    last_resync = time.monotonic()
                failures.succeeded()
                if published.events or published.statuses:
                    continue  # more may be waiting
            except Exception as error:
                if isinstance(error, psycopg.Error):
                    metrics.DB_ERRORS.labels("publisher").inc()
                    session.close()
                failures.failed(f"{type(error).__name__}: {error}")
            stop.wait(interval)
        session.close()

    # -- Events -------------------------------------------------------------------------

    def _post_run_event(self, row: Obj) -> bool:
        kind = _event_kind(row)
        if kind is None:
            return False
        event_type, reason = kind
        return self.post_event(
            namespace=row["namespace"],
            scheduled_job=row["name"],
            uid=row["definition_id"],
            name=f"{row['name']}.run{row['run_id']}.{row['status'].lower()}",
            event_type=event_type,
            reason=reason,
            message=_event_message(row),
            at=row["at"],
        )

    def post_event(
        self,
        *,
        namespace: str,
        scheduled_job: str,
        uid: UUID,
        name: str,
        event_type: str,
        reason: str,
        message: str,
        at: datetime,
    ) -> bool:
        moment = status.timestamp(at)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name[:253], "namespace": namespace},
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": scheduled_job,
                "namespace": namespace,
                "uid": str(uid),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "pgsched"},
            "reportingComponent": "pgsched.dev/operator",
            "reportingInstance": "pgsched",
            "firstTimestamp": moment,
            "lastTimestamp": moment,
            "count": 1,
        }
        try:
            self._kube.create(api.path_of(namespace=namespace, plural="events"), body)
        except api.ApiError as error:
            if error.conflict:
                return False  # published before (a replayed batch)
            if error.not_found:  # the namespace is gone
                return False
            raise
        return True

    # -- Status and cleanup ---------------------------------------------------------------

    def _refresh(
        self, conn: Connection, definition_id: UUID, changes: list[Obj], result: PublishResult
    ) -> None:
        definition = definitions.get(conn, definition_id)
        if definition is None:
            return
        path = api.scheduled_job_path(definition.namespace, definition.name)
        if definition.deleted_at is None:
            try:
                current = self._kube.get(path)
            except api.ApiError as error:
                if error.not_found:
                    return
                raise
            if current.get("metadata", {}).get("uid") == str(definition.id):
                self.patch_status(conn, definition, current)
                result.statuses += 1
        if any(change["status"] in TERMINAL_STATUSES for change in changes):
            result.jobs_deleted += self._clean_up_jobs(conn, definition)

    def patch_status(self, conn: Connection, definition: Definition, current: Obj) -> Obj:
        """Render the ScheduledJob's status from the database and merge-patch it."""
        old = current.get("status") or {}
        new = status.render(
            definition,
            last_run=runs.last_run(conn, definition.id),
            active=runs.running_count(conn, definition.id),
            now=datetime.now(UTC),
            current=old,
            pool_found=_pool_found(conn, definition),
        )
        path = api.scheduled_job_path(definition.namespace, definition.name, subresource="status")
        self._kube.merge_patch(path, {"status": new})
        for condition in status.transitions(old, new):
            suspended_at = definition.auto_suspended_at
            if condition["reason"] == "TooManyFailures" and suspended_at is not None:
                self.post_event(
                    namespace=definition.namespace,
                    scheduled_job=definition.name,
                    uid=definition.id,
                    name=f"{definition.name}.suspended.{int(suspended_at.timestamp())}",
                    event_type="Warning",
                    reason="AutoSuspended",
                    message=condition["message"],
                    at=suspended_at,
                )
        return new

    def _clean_up_jobs(self, conn: Connection, definition: Definition) -> int:
        collection = api.path_of(group="batch", namespace=definition.namespace, plural="jobs")
        selector = f"{names.LABEL_SCHEDULED_JOB}={names.label_value(definition.name)}"
        items = self._kube.get(collection, labelSelector=selector).get("items") or []
        owned = [job for job in items if _owned_by(job, definition.id)]
        run_ids = [int(job["metadata"]["labels"][names.LABEL_RUN_ID]) for job in owned]
        known = runs.endings(conn, run_ids)
        doomed: list[Obj] = []
        finished: dict[bool, list[Obj]] = {True: [], False: []}
        for job in owned:
            ending = known.get(int(job["metadata"]["labels"][names.LABEL_RUN_ID]))
            conditions = {
                c["type"]
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("status") == "True"
            }
            if conditions & {"Complete", "SuccessCriteriaMet"}:
                finished[True].append(job)
            elif conditions & {"Failed", "FailureTarget"}:
                finished[False].append(job)
            elif must_stop(ending, definition) and job["metadata"].get("deletionTimestamp") is None:
                doomed.append(job)
        spec = definition.spec
        limits = {
            True: spec.get("successfulRunsHistoryLimit", 3),
            False: spec.get("failedRunsHistoryLimit", 1),
        }
        for succeeded, jobs in finished.items():
            jobs.sort(key=lambda job: job["metadata"].get("creationTimestamp", ""), reverse=True)
            doomed += [
                job
                for job in jobs[int(limits[succeeded]) :]
                if job["metadata"].get("deletionTimestamp") is None
            ]
        for job in doomed:
            try:
                self._kube.delete(f"{collection}/{job['metadata']['name']}")
            except api.ApiError as error:
                if not error.not_found:
                    raise
            labels = job["metadata"].get("labels") or {}
            logs.for_labels(
                log,
                run_id=labels.get(names.LABEL_RUN_ID),
                namespace=definition.namespace,
                name=definition.name,
                attempt=labels.get(names.LABEL_ATTEMPT),
            ).info("deleted Job %s/%s", definition.namespace, job["metadata"]["name"])
        return len(doomed)


# Reasons the engine gives runs it ends itself: their pods may still be running, and must not.
ENGINE_ENDED = frozenset({"HeartbeatLost", "Orphaned", "DeadlineExceeded"})
# A job that recorded its own end (the SDK runner) exits right after; give its pod this long
# before deleting its Job, so the Job completes normally and keeps its history and logs.
JOB_EXIT_GRACE = timedelta(seconds=30)


def _pool_found(conn: Connection, definition: Definition) -> bool:
    pool = definition.spec.get("pool")
    return not isinstance(pool, str) or pools.exists(conn, definition.namespace, pool)


def must_stop(ending: runs.Ending | None, definition: Definition) -> bool:
    """Whether a still-active Job must be deleted because its run has ended."""
    if ending is None or ending.status in ("QUEUED", "RUNNING") or ending.finished_at is None:
        return False
    if ending.reason in ENGINE_ENDED:
        return True
    if ending.status == "CANCELLED" and ending.cancel_requested_at is not None:
        waited = ending.finished_at - ending.cancel_requested_at
        if waited >= timedelta(seconds=definition.cancel_grace_seconds):
            return True  # ended by the engine after the cancel grace: stop the pod now
    return ending.checked_at - ending.finished_at > JOB_EXIT_GRACE


def _owned_by(job: Obj, uid: UUID) -> bool:
    return any(
        ref.get("uid") == str(uid) for ref in job.get("metadata", {}).get("ownerReferences") or []
    )


def _event_kind(row: Obj) -> tuple[str, str] | None:
    if row["status"] == "QUEUED":
        return ("Normal", "RunRetrying") if row["trigger"] == "retry" else None
    return _EVENTS.get(row["status"])


def _event_message(row: Obj) -> str:
    run = f"run {row['run_id']} (attempt {row['attempt']}, scheduled for {status.timestamp(row['scheduled_for'])})"
    state = row["status"]
    if state == "QUEUED":
        return (
            f"attempt {row['attempt']} queued as run {row['run_id']} for"
            f" {status.timestamp(row['scheduled_for'])}: run {row['retry_of']} failed with"
            f" {row['retry_of_reason']}"
        )
    if state == "RUNNING":
        return f"{run} started"
    if state == "COMPLETED":
        return f"{run} succeeded"
    detail = f"{row['reason']}: {row['error']}" if row.get("error") else str(row["reason"])
    verb = {"FAILED": "failed", "CANCELLED": "was cancelled", "SKIPPED": "was skipped"}[state]
    return f"{run} {verb}: {detail}"


def _count(row: Obj) -> None:
    namespace = row["namespace"]
    metrics.RUNS.labels(namespace, row["status"], row["reason"] or "").inc()
    if row["status"] == "RUNNING" and row["started_at"] is not None:
        metrics.SCHEDULE_SKEW.labels(namespace).observe(
            max(0.0, (row["started_at"] - row["scheduled_for"]).total_seconds())
        )
    if row["status"] in TERMINAL_STATUSES and row["started_at"] and row["finished_at"]:
        metrics.RUN_DURATION.labels(namespace, row["status"]).observe(
            max(0.0, (row["finished_at"] - row["started_at"]).total_seconds())
        )
    if row["status"] == "QUEUED" and row["trigger"] == "retry":
        metrics.RETRIES.labels(row["retry_of_reason"] or "").inc()
