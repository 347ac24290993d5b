"""kopf handlers: thin adapters from resource events to engine calls.

Every replica runs every handler (kopf in standalone mode, no peering): each handler is
idempotent, so two replicas handling the same event do the same harmless thing twice.

- ScheduledJob created/updated/resumed → validate, then upsert the definition (or record
  the rejection — an invalid spec, or ``spec.after`` closing a cycle — keeping the last
  valid generation in force), render the status, handle
  the ``run-now`` and ``cancel`` annotations;
- ScheduledJob deleted → the finalizer marks the definition deleted, cancels queued runs,
  asks running ones to stop and holds the deletion until none is running (their Jobs go
  with the ScheduledJob afterwards: owner references);
- one of our Jobs finished or vanished → the run's outcome, recorded fenced;
- ConcurrencyPool created/updated/resumed/deleted → its limit upserted into (or removed
  from) ``job_pools``, and the PoolReady condition of the jobs that name it refreshed.

Business rules live in the engine; errors from the database are raised as
``kopf.TemporaryError`` so kopf retries the handler.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import kopf
import psycopg
from psycopg_pool import ConnectionPool

from pgsched import logs, metrics
from pgsched import spec as spec_module
from pgsched.db import clock
from pgsched.engine import chain, definitions, pools, runs
from pgsched.engine.models import Definition
from pgsched.k8s import api, names, outcomes, status
from pgsched.k8s.publisher import Publisher

log = logging.getLogger(__name__)


@dataclass
class Context:
    """What handlers need, stored in kopf's ``memo`` at start-up."""

    pool: ConnectionPool[Any]
    kube: api.KubeApi
    publisher: Publisher
    clock: Callable[[], datetime | None]


def _context(memo: Any) -> Context:
    context = memo.get("pgsched")
    assert isinstance(context, Context), "the operator start-up did not run"
    return context


def _key(meta: Any, uid: str, generation: int) -> definitions.DefinitionKey:
    created = datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    return definitions.DefinitionKey(
        id=UUID(uid),
        namespace=meta["namespace"],
        name=meta["name"],
        generation=generation,
        created_at=created,
    )


@kopf.on.resume(names.GROUP, names.VERSION, names.PLURAL)
@kopf.on.create(names.GROUP, names.VERSION, names.PLURAL)
@kopf.on.update(names.GROUP, names.VERSION, names.PLURAL)
def reconcile(
    body: Any, spec: Any, meta: Any, uid: str, memo: Any, patch: kopf.Patch, **_: Any
) -> None:
    context = _context(memo)
    generation = int(meta.get("generation") or 1)
    key = _key(meta, uid, generation)
    pinned = context.clock()
    try:
        with context.pool.connection() as conn:
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
                _reject(context, conn, key, body, str(error), now=now)
                return
            raw_spec = _plain(spec)
            stored = definitions.get(conn, key.id)
            if not _in_force(stored, generation, raw_spec):
                try:
                    stored = definitions.upsert(conn, key, parsed, raw_spec=raw_spec, now=pinned)
                except chain.CycleError as error:
                    _reject(context, conn, key, body, str(error), now=now)
                    return
            assert stored is not None
            # On resume (every operator start) most resources are already up to date: their
            # status and Event need not be written again, thousands of times over.
            current = dict(body.get("status") or {})
            if current.get("observedGeneration") != generation or stored.generation != generation:
                # Written by kopf after the handler, in one status patch with its record of
                # the handled spec (status.kopf, see operator.py): a write per ScheduledJob
                # fewer than a status patch of our own next to kopf's annotation patch.
                new = context.publisher.render_status(conn, stored, dict(body))
                patch.status.update(new)
                context.publisher.announce_transitions(stored, dict(body), new)
                # Downstreams naming this one: their UpstreamsFound condition may change.
                context.publisher.refresh_statuses(
                    conn, chain.downstream_ids(conn, namespace=key.namespace, name=key.name)
                )
                if stored.generation == generation:
                    context.publisher.post_event(
                        namespace=key.namespace,
                        scheduled_job=key.name,
                        uid=key.id,
                        name=f"{key.name}.gen{generation}.scheduled",
                        event_type="Normal",
                        reason="Scheduled",
                        message=f"generation {generation} accepted; next run at"
                        f" {status.timestamp(stored.next_run_at) or 'never'}",
                        at=now,
                    )
            _handle_annotations(context, conn, key, meta)
    except psycopg.Error as error:
        metrics.DB_ERRORS.labels("handlers").inc()
        raise kopf.TemporaryError(f"database error, will retry: {error}", delay=5) from error
    except api.ApiError as error:
        raise kopf.TemporaryError(f"Kubernetes API error, will retry: {error}", delay=5) from error


def _in_force(stored: Definition | None, generation: int, raw_spec: Any) -> bool:
    """Whether this generation's spec is already the stored definition, as on every
    operator start for all but the changed ScheduledJobs: then nothing is written (an
    upsert would rewrite every row of a fleet on each restart of each replica)."""
    return (
        stored is not None
        and stored.generation == generation
        and stored.rejection is None
        and stored.deleted_at is None
        and stored.spec == raw_spec
    )


def _reject(
    context: Context,
    conn: Any,
    key: definitions.DefinitionKey,
    body: Any,
    message: str,
    *,
    now: datetime,
) -> None:
    log.warning("%s generation %s rejected: %s", key.hash_seed, key.generation, message)
    stored = definitions.reject(conn, key, message)
    if stored is not None:
        context.publisher.patch_status(conn, stored, dict(body))
    else:
        new = status.render_rejected(
            dict(body.get("spec") or {}),
            generation=key.generation,
            message=message,
            now=now,
            current=dict(body.get("status") or {}),
        )
        path = api.scheduled_job_path(key.namespace, key.name, subresource="status")
        context.kube.merge_patch(path, {"status": new})
    context.publisher.post_event(
        namespace=key.namespace,
        scheduled_job=key.name,
        uid=key.id,
        name=f"{key.name}.gen{key.generation}.invalid",
        event_type="Warning",
        reason="InvalidSpec",
        message=message,
        at=now,
    )


def _handle_annotations(
    context: Context, conn: Any, key: definitions.DefinitionKey, meta: Any
) -> None:
    annotations = dict(meta.get("annotations") or {})
    token = annotations.get(names.ANNOTATION_RUN_NOW)
    if token:
        enqueued = runs.run_now(conn, key.id, token=f"annotation:{token}")
        if enqueued.created:
            logs.for_labels(
                log,
                run_id=enqueued.run.id,
                namespace=key.namespace,
                name=key.name,
                attempt=enqueued.run.attempt,
            ).info("%s: run-now %r queued run %s", key.hash_seed, token, enqueued.run.id)
    target = annotations.get(names.ANNOTATION_CANCEL)
    if target:
        _cancel(conn, key, target)
        # A cancel request is a one-shot command: clear it, so a later reconcile (or an
        # operator restart) never cancels runs that started after the request.
        path = api.scheduled_job_path(key.namespace, key.name)
        context.kube.merge_patch(
            path, {"metadata": {"annotations": {names.ANNOTATION_CANCEL: None}}}
        )


def _cancel(conn: Any, key: definitions.DefinitionKey, target: str) -> None:
    why = f"cancelled through the {names.ANNOTATION_CANCEL} annotation"
    logger: logging.Logger | logs.ContextAdapter = log
    if target == "all":
        outcome = runs.cancel_definition(conn, key.id, by=runs.BY_ANNOTATION, why=why)
    elif target.isdigit():
        run = runs.get(conn, int(target))
        if run is None or run.definition_id != key.id:
            log.warning(
                "%s: cancel annotation names run %s, which is not one of its runs",
                key.hash_seed,
                target,
            )
            return
        outcome = runs.cancel_run(conn, run.id, by=runs.BY_ANNOTATION, why=why)
        logger = logs.for_labels(
            log, run_id=run.id, namespace=key.namespace, name=key.name, attempt=run.attempt
        )
    else:
        log.warning("%s: cancel annotation %r is neither a run id nor 'all'", key.hash_seed, target)
        return
    logger.info(
        "%s: cancel %s: %d queued runs cancelled, %d running runs asked to stop",
        key.hash_seed,
        target,
        len(outcome.cancelled),
        len(outcome.asked_to_stop),
    )


@kopf.on.delete(names.GROUP, names.VERSION, names.PLURAL)
def delete(uid: str, meta: Any, memo: Any, **_: Any) -> None:
    """The finalizer: stop the runs cooperatively, then let the ScheduledJob go.

    Marks the definition deleted (nothing new is scheduled), cancels its queued runs and
    asks running ones to stop — the heartbeat writes the cancel file, SDK jobs stop at their
    next checkpoint. While any run is still RUNNING the finalizer stays (kopf retries this
    handler every few seconds): deleting the ScheduledJob at once would garbage-collect the
    Jobs and kill their pods with no grace. A run that ignores the request is ended
    ``CANCELLED`` by the engine after its ``cancelGraceSeconds`` and its Job deleted; so a
    delete takes at most the longest ``cancelGraceSeconds`` of its running runs plus a few
    seconds (while an operator is running). The runs stay in the database
    (``pgsched runs NAME --include-deleted``)."""
    context = _context(memo)
    definition_id = UUID(uid)
    try:
        with context.pool.connection() as conn:
            stopping = definitions.delete(conn, definition_id)
            running = runs.counts(conn, definition_id).running
            stored = definitions.get(conn, definition_id)
            downstreams = chain.downstream_ids(conn, namespace=meta["namespace"], name=meta["name"])
            try:
                context.publisher.refresh_statuses(conn, downstreams)
            except api.ApiError as error:
                # Their UpstreamMissing condition shows on their next status refresh.
                log.warning("could not refresh the downstreams of %s: %s", meta["name"], error)
    except psycopg.Error as error:
        metrics.DB_ERRORS.labels("handlers").inc()
        raise kopf.TemporaryError(f"database error, will retry: {error}", delay=5) from error
    where = f"{meta['namespace']}/{meta['name']}"
    if stopping:
        log.info(
            "%s deleted: definition marked deleted, %d running runs asked to stop",
            where,
            len(stopping),
        )
    if running:
        grace = stored.cancel_grace_seconds if stored else 0
        raise kopf.TemporaryError(
            f"{running} run(s) of {where} still running: asked to stop, and stopped by the"
            f" engine after cancelGraceSeconds ({grace}s); the ScheduledJob is deleted once"
            " none is running",
            delay=2,
        )
    log.info("%s deleted: no run is running, the finalizer is released", where)


@kopf.on.resume(names.GROUP, names.VERSION, names.POOL_PLURAL)
@kopf.on.create(names.GROUP, names.VERSION, names.POOL_PLURAL)
@kopf.on.update(names.GROUP, names.VERSION, names.POOL_PLURAL)
def reconcile_pool(spec: Any, meta: Any, memo: Any, **_: Any) -> None:
    context = _context(memo)
    namespace, name = meta["namespace"], meta["name"]
    limit = spec.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        # The CRD's schema refuses this at admission; a pool applied without it is
        # ignored (its jobs wait), never retried in a loop.
        log.warning(
            "ConcurrencyPool %s/%s: spec.limit must be an integer of at least 1, got %r"
            " (example: limit: 2); ignored",
            namespace,
            name,
            limit,
        )
        return
    with _database(), context.pool.connection() as conn:
        pools.upsert(conn, namespace, name, limit, now=context.clock())
        _refresh_members(context, conn, namespace, name)
    log.info("ConcurrencyPool %s/%s: limit %d", namespace, name, limit)


@kopf.on.delete(names.GROUP, names.VERSION, names.POOL_PLURAL)
def delete_pool(meta: Any, memo: Any, **_: Any) -> None:
    context = _context(memo)
    namespace, name = meta["namespace"], meta["name"]
    with _database(), context.pool.connection() as conn:
        pools.delete(conn, namespace, name)
        _refresh_members(context, conn, namespace, name)
    log.info("ConcurrencyPool %s/%s deleted: the jobs that name it wait", namespace, name)


@contextlib.contextmanager
def _database() -> Iterator[None]:
    """Database and API errors become kopf retries, counted like the other handlers'."""
    try:
        yield
    except psycopg.Error as error:
        metrics.DB_ERRORS.labels("handlers").inc()
        raise kopf.TemporaryError(f"database error, will retry: {error}", delay=5) from error
    except api.ApiError as error:
        raise kopf.TemporaryError(f"Kubernetes API error, will retry: {error}", delay=5) from error


def _refresh_members(context: Context, conn: Any, namespace: str, name: str) -> None:
    """Re-render the status (PoolReady) of every live job that names the pool."""
    for definition_id in pools.members(conn, namespace, name):
        definition = definitions.get(conn, definition_id)
        if definition is None:
            continue
        try:
            current = context.kube.get(api.scheduled_job_path(namespace, definition.name))
        except api.ApiError as error:
            if error.not_found:
                continue
            raise
        if current.get("metadata", {}).get("uid") == str(definition.id):
            context.publisher.patch_status(conn, definition, current)


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_RUN_ID: kopf.PRESENT})
def job_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    deleted = event.get("type") == "DELETED"
    if not deleted and not outcomes.finished(dict(body)):
        return
    context = _context(memo)
    metadata = body["metadata"]
    fingerprint = names.job_lease_fingerprint(metadata.get("annotations"))
    run_id = metadata["labels"][names.LABEL_RUN_ID]
    if not fingerprint or not run_id.isdigit():
        return
    labels = metadata.get("labels") or {}
    log_run = logs.for_labels(
        log,
        run_id=run_id,
        namespace=metadata["namespace"],
        name=labels.get(names.LABEL_SCHEDULED_JOB),
        attempt=labels.get(names.LABEL_ATTEMPT),
    )
    try:
        pods = api.pods_of_job(context.kube, metadata["namespace"], metadata["name"])
        with context.pool.connection() as conn:
            outcome = outcomes.record(
                conn,
                int(run_id),
                fingerprint,
                job=dict(body),
                pods=pods,
                deleted=deleted,
                logger=log_run,
            )
    except (psycopg.Error, api.ApiError) as error:
        if isinstance(error, psycopg.Error):
            metrics.DB_ERRORS.labels("handlers").inc()
        # Event handlers are not retried by kopf: the run stays RUNNING and the Job's next
        # event (or, failing that, the heartbeat reaper) settles it.
        log_run.warning(
            "run %s: could not record the outcome of Job %s yet: %s",
            run_id,
            metadata["name"],
            error,
        )
        return
    if outcome is not None:
        log_run.info(
            "run %s: Job %s ended, run %s %s",
            run_id,
            metadata["name"],
            outcome.status,
            outcome.reason or "",
        )


def _plain(value: Any) -> Any:
    """kopf's spec views → plain JSON values, for storing."""
    if hasattr(value, "items"):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
