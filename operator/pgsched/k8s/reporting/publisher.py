"""The publisher: run status changes become what users see in Kubernetes.

It drains the ``pgsched.run_events`` outbox (filled by triggers on every run status change)
in batches claimed with ``FOR UPDATE SKIP LOCKED``, so every replica can publish and each
change is published by one of them: Kubernetes Events, one status patch per ScheduledJob
touched, Job clean-up for ended runs, and run metrics. The rows are deleted in the same
transaction after the API calls succeeded, so a failure publishes them again (at least
once); Events have deterministic names, so a repeat posts nothing twice.

``run_once`` is one batch, run in the shared service loop (``engine.loop``). Due instants
take turns in the claim (``claim_run_events``) so a run outside a stampede is not published
after all of it.

A namespace's trouble stays its own: when the API server refuses a ScheduledJob's Event or
status write for a reason of its namespace's (``ApiError.refused``: 403 because the
namespace is terminating or the operator's Role in it is gone, quota, a webhook's denial),
that ScheduledJob's changes leave the outbox unpublished, with a warning and a metric, and
the batch goes on; retrying them could only hold up every other namespace's. The runs
themselves are in the database, and the next change re-renders the status whole. The API
server away (5xx, 429, no answer) still rolls the batch back, to be published again.
A namespace seen being deleted (``k8s.client.endings``: by a refusal saying so, by the
finalizer or the outcome watch) gets no request at all for its ScheduledJobs' changes:
they are counted in the run metrics and leave the outbox.

Why and how: docs/architecture.md, "Publishing run changes".
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from pgsched import metrics
from pgsched.db import clock, queries
from pgsched.db.connection import Connection
from pgsched.engine import (
    calendars,
    chain,
    deadlines,
    definitions,
    notifications,
    pools,
    runs,
    starts,
    waits,
)
from pgsched.engine.models import TERMINAL_STATUSES, Definition
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.client.latest import LatestObjects
from pgsched.k8s.jobside import cleanup
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting import status

log = logging.getLogger(__name__)


# RUNNING: claimed and launched; STARTED: its workload container started; LAUNCHING: its
# pod cannot start yet, for a reason worth telling (engine.starts, k8s.jobside.starts).
_EVENTS: dict[str, tuple[str, str]] = {
    "RUNNING": ("Normal", "RunLaunched"),
    starts.STARTED: ("Normal", "RunStarted"),
    starts.LAUNCHING: ("Warning", "RunNotStarting"),
    "COMPLETED": ("Normal", "RunSucceeded"),
    "FAILED": ("Warning", "RunFailed"),
    "CANCELLED": ("Normal", "RunCancelled"),
    "SKIPPED": ("Warning", "RunSkipped"),
}
# Skips that are plans, not trouble (docs/notifications.md, "Skipped occurrences"): their
# RunSkipped Event is Normal. QueueFull, MissedDowntime and DeadlineMissed stay Warnings.
PLANNED_SKIPS = frozenset(
    {"Suspended", "CalendarExcluded", "ConcurrencyPolicy", "DSTGap", "DuplicateOfRestoredRun"}
)
# Not run statuses: settle's notes that a definition was suspended automatically, and
# that a failed run is not retried (the RunNotRetried Event says why).
AUTO_SUSPENDED = "AUTO_SUSPENDED"
NOT_RETRIED = "NOT_RETRIED"
# The deadline service's note: a run not finished by its spec.deadline (engine.deadlines).
DEADLINE_MISSED = "DEADLINE_MISSED"
# How long one batch publishes before it commits and claims again in fresh turns.
BATCH_SECONDS = 1.0
# Status patches that found the ScheduledJob changed since it was read, before giving up
# (the batch is then rolled back and published again later).
CONFLICT_ATTEMPTS = 5
# What PublishResult.refused says of a namespace seen being deleted (Publisher._going).
GOING = "the namespace is being deleted"
# A namespace whose changes keep being refused is named in the log once per this long.
REFUSAL_LOG_SECONDS = 60.0


@dataclass
class PublishResult:
    events: int = 0
    statuses: int = 0
    jobs_deleted: int = 0
    definitions: set[UUID] = field(default_factory=set)
    # Namespace -> the API server's refusal: their changes were dropped (see the docstring).
    refused: dict[str, str] = field(default_factory=dict)


class Publisher:
    def __init__(
        self,
        kube: api.KubeApi,
        *,
        batch_size: int = 200,
        clock: Callable[[], datetime | None] = lambda: None,
        latest: LatestObjects | None = None,
    ) -> None:
        self.kube = kube
        self._batch_size = batch_size
        # ScheduledJobs as the operator's watch last saw them (or a write answered): a
        # status write starts from there instead of a GET. None: always read.
        self._latest = latest
        self._clock = clock  # the pinned "now" of a test, or None: the database's
        self._refusals_logged: dict[str, float] = {}  # namespace -> monotonic, last warned

    def run_once(self, conn: Connection) -> PublishResult:
        """One batch: claim changes in fair turns, publish them a ScheduledJob at a time
        for at most ``BATCH_SECONDS``, delete what was published."""
        result = PublishResult()
        started = time.monotonic()
        with conn.transaction():
            rows = conn.execute(
                queries.get("claim_run_events"), {"limit": self._batch_size}
            ).fetchall()
            if not rows:
                return result
            by_definition: dict[UUID, list[Obj]] = defaultdict(list)
            for row in rows:  # in turn order, so the ScheduledJobs are too
                by_definition[row["definition_id"]].append(row)
            published: list[Obj] = []
            for definition_id, changes in by_definition.items():
                definition = definitions.get(conn, definition_id)
                going = self._going(definition)
                try:
                    for row in changes:
                        result.events += self._announce(row, post=not going)
                    if going:
                        result.refused[str(changes[0]["namespace"])] = GOING
                    else:
                        self._refresh(conn, definition, changes, result)
                except api.ApiError as error:
                    if not error.refused:
                        raise
                    self._set_aside(changes, error, result)
                result.definitions.add(definition_id)
                published += changes
                if time.monotonic() - started >= BATCH_SECONDS:
                    break  # the rest stays on the outbox, for the next claim's turns
            # A chained run's upstream lists the runs it triggered: refresh it too.
            chained = [row["run_id"] for row in published if row["trigger"] == "upstream"]
            for upstream_id in chain.upstream_definitions(conn, chained) if chained else []:
                if upstream_id not in result.definitions:
                    self._refresh(conn, definitions.get(conn, upstream_id), [], result)
                    result.definitions.add(upstream_id)
            conn.execute(
                queries.get("delete_run_events"), {"ids": [row["id"] for row in published]}
            )
        return result

    def _going(self, definition: Definition | None) -> bool:
        """Whether the ScheduledJob is of a namespace seen being deleted: the API server
        refuses its Events, its status and Jobs go with it, and asking would only take the
        API budget every other namespace's statuses share (``k8s.client.endings``)."""
        return definition is not None and self.kube.endings.known(
            definition.namespace, definition.created_at
        )

    def _set_aside(self, changes: list[Obj], error: api.ApiError, result: PublishResult) -> None:
        """Drop one ScheduledJob's changes the API server refused (the module's docstring)."""
        namespace = str(changes[0]["namespace"])
        if error.namespace_terminating:
            # Terminating since now at the latest: the rest of its changes are not sent.
            self.kube.endings.saw(namespace, clock.local())
        metrics.PUBLISH_REFUSED.labels(namespace, str(error.status)).inc(len(changes))
        result.refused[namespace] = str(error)
        now = time.monotonic()
        last = self._refusals_logged.get(namespace)
        if last is not None and now - last < REFUSAL_LOG_SECONDS:
            return
        self._refusals_logged[namespace] = now
        log.warning(
            "namespace %s refused the run changes of ScheduledJob %s (%s); they are not"
            " published there (the runs are recorded; the next change renders its status"
            " whole), and every other namespace's go on. This warning repeats at most every"
            " %.0f s per namespace",
            namespace,
            changes[0]["name"],
            error,
            REFUSAL_LOG_SECONDS,
        )

    # -- Events -------------------------------------------------------------------------

    def _announce(self, row: Obj, *, post: bool) -> int:
        """Count one change in the run metrics and (``post``) post its Event; 1 if one was
        posted."""
        if row["status"] == AUTO_SUSPENDED:
            return 0  # only the status refresh; its Event comes from there
        if row["status"] == DEADLINE_MISSED:
            metrics.DEADLINES_MISSED.labels(row["namespace"]).inc()
        elif row["status"] != NOT_RETRIED:
            _count(row)
        return 1 if post and self._post_run_event(row) else 0

    def _post_run_event(self, row: Obj) -> bool:
        kind = _event_kind(row)
        if kind is None or _never_launched(row):
            return False
        event_type, reason = kind
        return self.post_event(
            namespace=row["namespace"],
            scheduled_job=row["name"],
            uid=row["definition_id"],
            name=f"{row['name']}.run{row['run_id']}.{_event_suffix(row)}",
            event_type=event_type,
            reason=reason,
            message=event_message(row),
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
            self.kube.create(api.path_of(namespace=namespace, plural="events"), body)
        except api.ApiError as error:
            if error.conflict:
                return False  # published before (a replayed batch)
            if error.not_found:  # the namespace is gone
                return False
            raise
        return True

    # -- Status and cleanup ---------------------------------------------------------------

    def _refresh(
        self,
        conn: Connection,
        definition: Definition | None,
        changes: list[Obj],
        result: PublishResult,
    ) -> None:
        if definition is None:
            return
        path = api.scheduled_job_path(definition.namespace, definition.name)
        if definition.deleted_at is None:
            try:
                current = self._current(path, definition)
                if current.get("metadata", {}).get("uid") == str(definition.id):
                    self.patch_status(conn, definition, current)
                    result.statuses += 1
            except api.ApiError as error:
                if not error.not_found:
                    raise
                if self._latest is not None:
                    self._latest.forget(path)
                return  # gone: its deletion's handler cleans up
        if any(change["status"] in TERMINAL_STATUSES for change in changes):
            result.jobs_deleted += cleanup.run_once(
                conn, self.kube, [definition], now=self._clock()
            ).deleted

    def _current(self, path: str, definition: Definition) -> Obj:
        """The ScheduledJob to render against: the latest copy of this definition's object
        if one is kept (a write against a stale one is refused and read again), else read."""
        copy = self._latest.get(path) if self._latest is not None else None
        if copy is not None and copy["metadata"].get("uid") == str(definition.id):
            return copy
        return self.kube.get(path)  # none kept, or a namesake's: maybe the copy is behind

    def refresh_statuses(self, conn: Connection, definition_ids: list[UUID]) -> None:
        """Re-render these ScheduledJobs' statuses (say, an upstream they name appeared or
        went away: their UpstreamsFound condition changed though none of their runs did).
        Not those of a namespace seen going: they go with it (``_going``)."""
        for definition_id in definition_ids:
            definition = definitions.get(conn, definition_id)
            if not self._going(definition):
                self._refresh(conn, definition, [], PublishResult())

    def patch_status(self, conn: Connection, definition: Definition, current: Obj) -> None:
        """Render the ScheduledJob's status from the database and merge-patch it, naming
        the resourceVersion of ``current``, the object it was rendered against.

        Two writers may render the same ScheduledJob at once (this batch, a pool's handler,
        another replica, ``pgsched suspend``), and a render can wait for the API budget
        before its patch is sent: unconditioned, a status rendered before a change could
        arrive after one rendered from it and stay (PoolReady True after its pool was
        deleted, until the next run). So a patch that finds the object changed since it
        was read (409) reads it again and renders again, from the database as it is now.
        """
        path = api.scheduled_job_path(definition.namespace, definition.name)
        status_path = api.scheduled_job_path(
            definition.namespace, definition.name, subresource="status"
        )
        for _ in range(CONFLICT_ATTEMPTS):
            new = self.render_status(conn, definition, current)
            try:
                written = self.kube.merge_patch(status_path, status.versioned_patch(current, new))
            except api.ApiError as error:
                if not error.conflict:
                    raise
                current = self.kube.get(path)
                self._keep(path, current)
                if current.get("metadata", {}).get("uid") != str(definition.id):
                    return  # deleted and created again: its own definition's to render
                continue
            self._keep(path, written)
            self.announce_transitions(definition, current, new)
            return
        raise api.ApiError(
            "PATCH", status_path, 409, {"reason": "Conflict", "message": "the object kept changing"}
        )

    def _keep(self, path: str, obj: Obj) -> None:
        if self._latest is not None:
            self._latest.written(path, obj)

    def render_status(self, conn: Connection, definition: Definition, current: Obj) -> Obj:
        """The ScheduledJob's status rendered from the database, for a merge patch (the
        caller writes it, then calls ``announce_transitions``)."""
        old = current.get("status") or {}
        counts, last_run = runs.for_status(conn, definition.id)
        refusal = starts.refusal(conn, definition)
        now = clock.now(conn, self._clock())
        return status.render(
            definition,
            refusal=refusal,
            last_run=last_run,
            active=counts.running,
            queued=counts.queued,
            now=now,
            current=old,
            links=chain.links(
                conn, definition.id, namespace=definition.namespace, name=definition.name
            ),
            triggered=chain.triggered(conn, [last_run.id]).get(last_run.id) if last_run else None,
            pool_found=pools.found_for(conn, definition),
            start=starts.of_run(conn, last_run.id) if last_run else None,
            finish_by=deadlines.finish_by(conn, [last_run.id]).get(last_run.id)
            if last_run
            else None,
            wait=waits.first_of(conn, definition.id, now=now) if counts.queued else None,
            calendars=calendars.load(conn, definition),
            notify=notifications.effective(conn, definition.id),
        )

    def announce_transitions(self, definition: Definition, current: Obj, new: Obj) -> None:
        """The Events of what changed between ``current``'s status and ``new``, with the new
        status written (or about to be): a condition that flipped (auto-suspension), and
        what holds the oldest queued run (``RunWaiting``, once per run and reason; not for
        a run merely between its queueing and the next dispatch, as every run is)."""
        waiting = new.get("waiting")
        before = (current.get("status") or {}).get("waiting") or {}
        if (
            waiting
            # Every run waits a moment for its dispatch, and a jittered job's every run for
            # its jittered start: expected, not worth an Event each.
            and waiting["reason"] not in (waits.DISPATCH, waits.JITTERED)
            and waiting["since"] != before.get("since")
        ):
            self.post_event(
                namespace=definition.namespace,
                scheduled_job=definition.name,
                uid=definition.id,
                name=f"{definition.name}.run{waiting['runId']}.waiting.{waiting['reason'].lower()}",
                event_type="Normal",
                reason="RunWaiting",
                message=f"run {waiting['runId']} waits for {waiting['message']}",
                at=datetime.fromisoformat(waiting["since"]),
            )
        for condition in status.transitions(current.get("status") or {}, new):
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


def _event_kind(row: Obj) -> tuple[str, str] | None:
    if row["status"] == NOT_RETRIED:
        return "Warning", "RunNotRetried"
    if row["status"] == DEADLINE_MISSED:
        return "Warning", "RunDeadlineMissed"
    if row["status"] == "QUEUED":
        return ("Normal", "RunRetrying") if row["trigger"] == "retry" else None
    if row["status"] == "SKIPPED" and row["reason"] in PLANNED_SKIPS:
        return "Normal", "RunSkipped"
    return _EVENTS.get(row["status"])


def _event_suffix(row: Obj) -> str:
    """One Event per status; a run may stop starting for several reasons in turn."""
    if row["status"] == starts.LAUNCHING:
        return f"launching.{str(row['reason']).lower()}"
    return str(row["status"]).lower()


def event_message(row: Obj) -> str:
    run = f"run {row['run_id']} (attempt {row['attempt']}, scheduled for {status.timestamp(row['scheduled_for'])})"
    state = row["status"]
    if state == NOT_RETRIED:
        why = str(row.get("retry_decision") or "").removeprefix("not retried: ")
        return f"{run} failed with {row['reason']} and is not retried: {why}"
    if state == DEADLINE_MISSED:
        return f"{run} has not finished by its deadline (spec.deadline); it keeps running"
    if state == "QUEUED":
        why = row.get("retry_of_decision") or ""
        why = f" ({why.split(': ', 1)[-1]})" if ": " in why else ""
        return (
            f"attempt {row['attempt']} queued as run {row['run_id']} for"
            f" {status.timestamp(row['scheduled_for'])}: run {row['retry_of']} failed with"
            f" {row['retry_of_reason']}{why}"
        )
    if state == "RUNNING":
        return f"{run} launched as Job {row['k8s_job_name'] or '(being created)'}"
    if state == starts.STARTED:
        return f"{run}: its workload started"
    if state == starts.LAUNCHING:
        return f"{run} cannot start yet: {row['reason']}: {row.get('waiting_message') or ''}"
    if state == "COMPLETED":
        return f"{run} succeeded"
    detail = f"{row['reason']}: {row['error']}" if row.get("error") else str(row["reason"])
    verb = {"FAILED": "failed", "CANCELLED": "was cancelled", "SKIPPED": "was skipped"}[state]
    if state == "CANCELLED" and row.get("cancelled_by"):
        verb += f" by {row['cancelled_by']}"
    return f"{run} {verb}: {detail}"


def _never_launched(row: Obj) -> bool:
    """A claim whose launch was refused or put off (the run ended or was queued again, and
    no Job was recorded): its claim is no launch to announce (RunFailed says why)."""
    return row["status"] == "RUNNING" and not row["k8s_job_name"] and row["run_status"] != "RUNNING"


def _count(row: Obj) -> None:
    namespace = row["namespace"]
    if row["status"] in (starts.STARTED, starts.LAUNCHING):
        metrics.RUN_STARTS.labels(namespace, row["status"], row["reason"] or "").inc()
        return
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
