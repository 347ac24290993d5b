"""ScheduledJobs: what users apply becomes a definition in the database, and back.

Two halves, so that a fleet costs the database's pace, not the API server's: :func:`sync`
(the ScheduledJob watch's workers) turns one ScheduledJob into its definition — validated,
upserted or its rejection recorded, a deletion marked, its request annotations carried out
(:mod:`pgsched.k8s.scheduledjobs.commands`) — and returns what Kubernetes must be told as a
small :class:`Writes` record, which :func:`scheduledjob_writer.write` (the writer threads)
carries out: finalizer, status, Events, answers to requests. A job is scheduled from the
moment ``sync`` stored it; records are small, so a fleet waiting for the API budget costs
megabytes.

Every replica syncs every ScheduledJob; each sync is idempotent, and an unchanged,
published one writes nothing.

The two halves in full: docs/architecture.md, "ScheduledJob sync".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from pgsched import spec as spec_module
from pgsched.db import clock, replication
from pgsched.engine import chain, definitions, runs
from pgsched.engine.models import Definition
from pgsched.k8s import names
from pgsched.k8s.client import api, controller, finalizers, reads
from pgsched.k8s.jobside import jobpolicy
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting import status
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import commands, suspension

log = logging.getLogger(__name__)

# A deleted ScheduledJob whose runs are still stopping is looked at again this often.
DELETION_RECHECK_SECONDS = 2.0
# A request carried out and not flushed by every standby yet is looked at again after a
# quarter of the time it has waited, within these bounds: soon while a standby is merely a
# few milliseconds behind, rarely while one is stuck (a fleet of waiting requests then
# costs the database a query per ScheduledJob every few seconds).
DURABILITY_RECHECK_SECONDS = (0.1, 5.0)
# Waiting this long, a request is announced with a Normal Event (commands.waiting_event_name)
# that the CLI reads when its wait ends: carried out, not removed yet.
DURABILITY_NOTICE_SECONDS = 5.0


@dataclass(frozen=True)
class Unflushed:
    """A request carried out whose commit some standby had not flushed yet."""

    position: replication.Position  # the WAL position after the commit
    since: float  # time.monotonic() when it was carried out
    version: str  # the ScheduledJob's resourceVersion then: names its waiting Event
    announced: bool = False  # its waiting Event was handed to the writer


@dataclass
class Context:
    """What syncing and writing need; one per operator."""

    pool: ConnectionPool[Any]
    kube: api.KubeApi
    publisher: Publisher
    clock: Callable[[], datetime | None]
    # Requests carried out and not removed yet, by uid: the watch events that come before
    # the removal (the finalizer's, the status's) do not carry them out again. Carrying out
    # twice is harmless by design, but each time is a database round and a log line, and
    # a run-now token's uniqueness check is not proof against every concurrent change of
    # job_runs' partitions (the history service moving a month out of the default one).
    in_hand: dict[UUID, set[commands.Request]] = field(default_factory=dict)
    # Requests carried out whose commit some standby has not flushed yet, by uid, with
    # the WAL position after that commit: looked at again until every standby has it,
    # and carried out again if the position is of an earlier timeline (a failover came
    # between and may have lost the commit).
    unflushed: dict[UUID, dict[commands.Request, Unflushed]] = field(default_factory=dict)
    # What a jobTemplate may name, and where jobs may run (k8s.jobside.jobpolicy).
    job_policy: jobpolicy.JobPolicy = field(default_factory=jobpolicy.JobPolicy)


@dataclass(frozen=True)
class EventNote:
    name: str
    type: str
    reason: str
    message: str
    at: datetime


@dataclass(frozen=True)
class Writes:
    """What Kubernetes must be told about one ScheduledJob, and the little of the object
    needed to tell it (never its spec)."""

    namespace: str
    name: str
    uid: UUID
    generation: int
    version: str
    finalizers: tuple[str, ...]
    conditions: tuple[Obj, ...]  # the status's, for transition times and flips
    created: str | None = None  # metadata.creationTimestamp
    add_finalizer: bool = False
    release_finalizer: bool = False
    # Publish the generation: the status (rendered from the database when written, or
    # the whole status of one never valid) and its Scheduled or InvalidSpec Event.
    status: bool = False
    rejected_status: Obj | None = None
    events: tuple[EventNote, ...] = ()
    # Requests answered: Warning Events (posted whatever the generation's state), the
    # request annotations to remove, and whether the status must be rendered again.
    answers: tuple[EventNote, ...] = ()
    remove: tuple[commands.Request, ...] = ()
    refresh: bool = False
    downstreams: tuple[UUID, ...] = ()

    @classmethod
    def of(cls, body: Obj) -> Writes:
        meta = body["metadata"]
        return cls(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=UUID(meta["uid"]),
            generation=int(meta.get("generation") or 1),
            version=str(meta.get("resourceVersion") or ""),
            finalizers=tuple(meta.get("finalizers") or ()),
            conditions=tuple((body.get("status") or {}).get("conditions") or ()),
            created=meta.get("creationTimestamp"),
        )

    @property
    def anything(self) -> bool:
        return (
            self.add_finalizer
            or self.release_finalizer
            or self.status
            or self.rejected_status is not None
            or bool(self.events)
            or bool(self.answers)
            or bool(self.remove)
            or self.refresh
            or bool(self.downstreams)
        )

    def merge(self, newer: Writes) -> Writes:
        """Both records' work, with the newer one's view of the object."""
        seen = {note.name for note in newer.events}
        answered = {note.name for note in newer.answers}
        return replace(
            newer,
            add_finalizer=(self.add_finalizer or newer.add_finalizer)
            and not newer.release_finalizer,
            release_finalizer=newer.release_finalizer,
            status=self.status or newer.status,
            rejected_status=newer.rejected_status or self.rejected_status,
            events=(*[note for note in self.events if note.name not in seen], *newer.events),
            answers=(*[note for note in self.answers if note.name not in answered], *newer.answers),
            remove=tuple(dict.fromkeys((*self.remove, *newer.remove))),
            refresh=self.refresh or newer.refresh,
            downstreams=tuple(dict.fromkeys((*self.downstreams, *newer.downstreams))),
        )


@dataclass(frozen=True)
class Synced:
    """What :func:`sync` did: the writes it asks for, and when to look again (a deleted
    job whose runs are still stopping, or a database error)."""

    writes: Writes | None = None
    retry_in: float | None = None


def sync(context: Context, body: Obj, *, revalidate: bool) -> Synced:
    """Bring the definition in line with ``body`` (the ScheduledJob as last seen).

    ``revalidate``: validate the spec even if it is the one in force — for every listed
    ScheduledJob (an operator start, a list after a 410), so that a definition an older
    release accepted and this one refuses is rejected on the first start of this one."""
    meta = body["metadata"]
    try:
        if reads.being_deleted(context.kube, meta):
            return _deleting(context, body)
        return _reconcile(context, body, revalidate=revalidate)
    except psycopg.Error as error:
        return Synced(retry_in=controller.retry_later(_where(meta), error, log))


def gone(context: Context, body: Obj) -> Synced:
    """The ScheduledJob was deleted without waiting for pgsched (its finalizer was never
    added, or was removed by hand): its definition is marked deleted all the same."""
    meta = body["metadata"]
    try:
        with context.pool.connection() as conn:
            stopping = definitions.delete(conn, UUID(meta["uid"]))
    except psycopg.Error as error:
        return Synced(retry_in=controller.retry_later(_where(meta), error, log))
    if stopping:
        log.info(
            "%s/%s is gone: definition marked deleted, %d running runs asked to stop",
            meta["namespace"],
            meta["name"],
            len(stopping),
        )
    return Synced()


def _reconcile(context: Context, body: Obj, *, revalidate: bool) -> Synced:
    meta, spec = body["metadata"], body.get("spec") or {}
    generation = int(meta.get("generation") or 1)
    key = _key(meta, generation)
    writes = replace(
        Writes.of(body), add_finalizer=finalizers.FINALIZER not in meta.get("finalizers", ())
    )
    observed = (body.get("status") or {}).get("observedGeneration") == generation
    in_hand = context.in_hand.get(key.id, set())
    requests = [
        request
        for request in commands.read(meta.get("annotations") or {})
        if request not in in_hand
    ]
    asked = bool(requests)
    # The pgsched.dev/suspend-reason annotation, compared with what the status shows.
    reason = suspension.reason_of(meta.get("annotations") or {})
    noted = reason == suspension.shown(body.get("status"))
    if not revalidate and observed and not writes.add_finalizer and not asked and noted:
        # The status shows this generation, so a replica synced and published it: a watch
        # event of a settled ScheduledJob (every status change the publisher makes) costs
        # nothing here. What the database may lack — a restored backup, another release's
        # rules — is looked at when the operator lists, on its start.
        return Synced()
    pinned = context.clock()
    with context.pool.connection() as conn:
        stored = definitions.get(conn, key.id)
        held = stored.suspend_reason if stored is not None else None  # upsert's row lacks it
        if (
            not revalidate
            and _published(stored, generation, observed=observed)
            and not writes.add_finalizer
            and _settled(stored, generation, spec)
            and not asked
            and held == reason
        ):
            return Synced()
        now = clock.now(conn, pinned)
        run_at = spec.get("runAt")
        new_run_at = isinstance(run_at, str) and not definitions.run_at_accepted(
            conn, key.id, run_at.strip()
        )
        try:
            parsed = spec_module.parse(
                dict(spec),
                hash_seed=key.hash_seed,
                anchor=key.created_at,
                now=now,
                run_at_not_before=now if new_run_at else None,
            )
        except spec_module.SpecError as error:
            return Synced(_reject(conn, key, spec, writes, str(error), now=now))
        # The operator's lists here; the namespace's own lists at launch (k8s.jobside.jobpolicy).
        refusal = jobpolicy.refusal(context.job_policy, namespace=key.namespace, spec=spec)
        if refusal is not None:
            return Synced(_reject(conn, key, spec, writes, refusal, now=now))
        if not _in_force(stored, generation, spec):
            try:
                stored = definitions.upsert(conn, key, parsed, raw_spec=spec, now=pinned)
            except chain.CycleError as error:
                return Synced(_reject(conn, key, spec, writes, str(error), now=now))
        assert stored is not None
        if held != reason:
            definitions.set_suspend_reason(conn, key.id, reason)
            writes = replace(writes, refresh=True)
        stored = replace(stored, suspend_reason=reason)
        if not _published(stored, generation, observed=observed) or (
            stored.generation != generation
        ):
            # Downstreams naming this one: their UpstreamsFound condition may change.
            downstreams = chain.downstream_ids(conn, namespace=key.namespace, name=key.name)
            writes = replace(writes, status=True, downstreams=tuple(downstreams))
            if stored.generation == generation:
                note = EventNote(
                    name=f"{key.name}.gen{generation}.scheduled",
                    type="Normal",
                    reason="Scheduled",
                    message=f"generation {generation} accepted; next run at"
                    f" {status.timestamp(stored.next_run_at) or 'never'}",
                    at=now,
                )
                writes = replace(writes, events=(note,))
        if asked:
            unflushed = context.unflushed.setdefault(key.id, {})
            writes = _answer(conn, stored, requests, unflushed, writes, now=now)
            context.in_hand.setdefault(key.id, set()).update(writes.remove)
            if unflushed:
                return Synced(writes, retry_in=_recheck_in(unflushed))
    return Synced(writes if writes.anything else None)


def _answer(
    conn: Any,
    stored: Definition,
    requests: list[commands.Request],
    unflushed: dict[commands.Request, Unflushed],
    writes: Writes,
    *,
    now: datetime,
) -> Writes:
    """Carry out the request annotations (but not again those waiting for the standbys on
    this timeline); each is removed once handled, refused or not, and once every connected
    standby has flushed the commit that handled it (k8s/scheduledjobs/commands.py says why)."""
    for request in set(unflushed) - set(requests):
        del unflushed[request]  # removed by someone else meanwhile
    # Only a request waiting already needs the timeline before: carried out on another?
    timeline = replication.progress(conn).position.timeline if unflushed else None
    due = [
        request
        for request in requests
        if request not in unflushed or unflushed[request].position.timeline != timeline
    ]
    answer = commands.handle(conn, stored, due, now=now)
    after = replication.progress(conn)
    carried_out = Unflushed(after.position, time.monotonic(), writes.version)
    unflushed.update(dict.fromkeys(due, carried_out))
    durable = tuple(request for request in requests if after.flushed(unflushed[request].position))
    for request in durable:
        del unflushed[request]
    notes = tuple(
        EventNote(
            name=commands.event_name(stored.name, problem.path, writes.version),
            type="Warning",
            reason=commands.REASON,
            message=str(problem),
            at=now,
        )
        for problem in answer.refused
    )
    refresh = writes.refresh or answer.resumed
    return replace(
        writes,
        answers=(*notes, *_announce(stored, unflushed, now=now)),
        remove=durable,
        refresh=refresh,
    )


def _announce(
    stored: Definition, unflushed: dict[commands.Request, Unflushed], *, now: datetime
) -> list[EventNote]:
    """A Normal Event for each request waiting for the standbys long enough to say so."""
    notes = []
    for request, waiting in unflushed.items():
        if waiting.announced or time.monotonic() - waiting.since < DURABILITY_NOTICE_SECONDS:
            continue
        unflushed[request] = replace(waiting, announced=True)
        notes.append(
            EventNote(
                name=commands.waiting_event_name(stored.name, request.annotation, waiting.version),
                type="Normal",
                reason=commands.WAITING_REASON,
                message=f"{request.annotation}={request.value} carried out; the request stays"
                " until every standby of the database has received it (a failover before"
                " then would have it carried out again, once)",
                at=now,
            )
        )
        log.info(
            "%s: %s carried out %.0f s ago, kept until every standby has flushed it",
            stored.key,
            request.annotation,
            time.monotonic() - waiting.since,
        )
    return notes


def _recheck_in(unflushed: dict[commands.Request, Unflushed]) -> float:
    """When to look at waiting requests again: a quarter of the longest wait, bounded."""
    first, most = DURABILITY_RECHECK_SECONDS
    waited = time.monotonic() - min(waiting.since for waiting in unflushed.values())
    return min(most, max(first, waited / 4))


def _published(stored: Definition | None, generation: int, *, observed: bool) -> bool:
    """The generation's status and Event are written: the status shows it, or the writer
    recorded it — then this body is the echo of a write made before it (the finalizer's,
    whose MODIFIED event still shows the old status: ``pgsched.published_generations``)."""
    return observed or (stored is not None and stored.published_generation == generation)


def _settled(stored: Definition | None, generation: int, spec: Obj) -> bool:
    """This generation was handled already: in force, or refused."""
    return _in_force(stored, generation, spec) or (
        stored is not None
        and stored.deleted_at is None
        and stored.rejected_generation == generation
    )


def _in_force(stored: Definition | None, generation: int, spec: Obj) -> bool:
    """Whether this generation's spec is already the stored definition, as on every
    operator start for all but the changed ScheduledJobs: then nothing is written (an
    upsert would rewrite every row of a fleet on each restart of each replica)."""
    return (
        stored is not None
        and stored.generation == generation
        and stored.rejection is None
        and stored.deleted_at is None
        and stored.spec == spec
    )


def _where(meta: Obj) -> str:
    return f"{meta['namespace']}/{meta['name']}"


def _key(meta: Obj, generation: int) -> definitions.DefinitionKey:
    created = names.timestamp(meta["creationTimestamp"])
    return definitions.DefinitionKey(
        id=UUID(meta["uid"]),
        namespace=meta["namespace"],
        name=meta["name"],
        generation=generation,
        created_at=created,
    )


def _reject(
    conn: Any,
    key: definitions.DefinitionKey,
    spec: Obj,
    writes: Writes,
    message: str,
    *,
    now: datetime,
) -> Writes:
    # Every replica gets here, each on several watch events: the WARNING is logged once,
    # by whichever posts the InvalidSpec Event (_publish).
    log.debug("%s generation %s rejected: %s", key.hash_seed, key.generation, message)
    stored = definitions.reject(conn, key, message)
    note = EventNote(
        name=f"{key.name}.gen{key.generation}.invalid",
        type="Warning",
        reason="InvalidSpec",
        message=message,
        at=now,
    )
    if stored is not None:  # an older generation stays in force; its status says why
        if stored.published_generation == key.generation:
            return writes  # this rejection was published
        return replace(writes, status=True, events=(note,))
    rejected = status.render_rejected(
        spec,
        generation=key.generation,
        message=message,
        now=now,
        current={"conditions": list(writes.conditions)},
    )
    return replace(writes, rejected_status=rejected, events=(note,))


def _deleting(context: Context, body: Obj) -> Synced:
    """The finalizer's work: stop the runs cooperatively, then let the ScheduledJob go —
    once it is deleted, or as soon as its namespace is known going (``reads.being_deleted``:
    Kubernetes deletes it only after the namespace's pods, too late to ask its runs first).

    Marks the definition deleted (nothing new is scheduled), cancels its queued runs and
    asks running ones to stop — the heartbeat writes the cancel file, SDK jobs stop at their
    next checkpoint. While any run is still RUNNING the finalizer stays (this is looked at
    again every few seconds): deleting the ScheduledJob at once would garbage-collect the
    Jobs and kill their pods with no grace. A run that ignores the request is ended
    ``CANCELLED`` by the engine after its ``cancelGraceSeconds`` and its Job deleted; so a
    delete takes at most the longest ``cancelGraceSeconds`` of its running runs plus a few
    seconds (while an operator is running). The runs stay in the database
    (``pgsched runs NAME --include-deleted``)."""
    meta = body["metadata"]
    where = _where(meta)
    how = "deleted" if meta.get("deletionTimestamp") else "is in a namespace being deleted"
    definition_id = UUID(meta["uid"])
    context.in_hand.pop(definition_id, None)
    context.unflushed.pop(definition_id, None)
    with context.pool.connection() as conn:
        stored = definitions.get(conn, definition_id)
    by, why = _deletion(context, meta, stored)
    with context.pool.connection() as conn:
        stopping = definitions.delete(conn, definition_id, by=by, why=why)
        running = runs.for_status(conn, definition_id)[0].running
        downstreams = chain.downstream_ids(conn, namespace=meta["namespace"], name=meta["name"])
    writes = replace(Writes.of(body), downstreams=tuple(downstreams))
    if stopping:
        log.info(
            "%s %s: definition marked deleted, %d running runs asked to stop",
            where,
            how,
            len(stopping),
        )
    if running:
        grace = stored.cancel_grace_seconds if stored else 0
        log.info(
            "%s: %d run(s) still running: asked to stop, and stopped by the engine after"
            " cancelGraceSeconds (%ss); the ScheduledJob is deleted once none is running",
            where,
            running,
            grace,
        )
        return Synced(writes, retry_in=DELETION_RECHECK_SECONDS)
    if finalizers.FINALIZER in writes.finalizers:
        log.info("%s %s: no run is running, the finalizer is released", where, how)
    return Synced(replace(writes, release_finalizer=True))


def _deletion(context: Context, meta: Obj, stored: Definition | None) -> tuple[str, str]:
    """Who deleted a ScheduledJob, as its runs' cancellations say: the whole namespace
    going (``kubectl delete namespace``), or the ScheduledJob alone — a person asking "why
    was my run cancelled?" should not read that someone deleted this job. Asked of the API
    server on the first pass only: the later ones (every few seconds while runs stop) find
    nothing left to cancel, so what they would say is never recorded."""
    namespace = str(meta["namespace"])
    first = stored is None or stored.deleted_at is None
    if first and reads.namespace_ending(
        context.kube, namespace, created=meta.get("creationTimestamp")
    ):
        return runs.BY_NAMESPACE_DELETION, f"namespace {namespace} deleted"
    return runs.BY_DELETION, "ScheduledJob deleted"
