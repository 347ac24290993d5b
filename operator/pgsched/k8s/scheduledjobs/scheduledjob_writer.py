"""The writer half of ScheduledJobs (:mod:`pgsched.k8s.scheduledjobs.scheduledjobs` is the sync half):
tell Kubernetes what one :class:`~pgsched.k8s.scheduledjobs.scheduledjobs.Writes` record says.

In this order: pgsched's finalizer (added, or released once a deleted job's runs stopped),
the generation's status and its Scheduled or InvalidSpec Event (once, by whichever replica
gets there first: the database remembers the published generation), the answers to
requests (Warning Events), the removal of one-shot request annotations (only if unchanged
since they were read), and the statuses of jobs downstream of it. The status is rendered
from the database when it is written, so a record that waited carries nothing stale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg

from pgsched.engine import definitions
from pgsched.engine.models import Definition
from pgsched.k8s.client import api, controller, finalizers
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting import status
from pgsched.k8s.scheduledjobs import commands
from pgsched.k8s.scheduledjobs.scheduledjobs import Context, EventNote, Writes

log = logging.getLogger(__name__)


def write(context: Context, writes: Writes) -> float | None:
    """Tell Kubernetes what ``writes`` says; None when done, else seconds until a retry."""
    try:
        _write(context, writes)
    except (api.ApiError, psycopg.Error) as error:
        return controller.retry_later(f"{writes.namespace}/{writes.name}", error, log)
    return None


def _write(context: Context, writes: Writes) -> None:
    kube, publisher = context.kube, context.publisher
    path = api.scheduled_job_path(writes.namespace, writes.name)
    version = writes.version
    if writes.release_finalizer:
        finalizers.remove(
            _releasing(writes, kube), path, finalizers=writes.finalizers, version=version
        )
    elif writes.add_finalizer:
        added = finalizers.add(kube, path, finalizers=writes.finalizers, version=version)
        if added is None:
            return  # gone, or being deleted: its deletion sync says the rest
        version = added
    publish = writes.status or writes.rejected_status is not None or bool(writes.events)
    if publish and not _publish(context, writes, version):
        return  # gone
    for note in writes.answers:
        # Every replica answers a request it sees; the Event's name is the same on all of
        # them, so one posts it and says it in its log, and the others find it posted.
        if _post(context, writes, note) and note.type == "Warning":
            log.warning("%s/%s: %s", writes.namespace, writes.name, note.message)
    for request in writes.remove:
        _remove_request(kube, path, request)
        context.in_hand.get(writes.uid, set()).discard(request)
    refresh = [*writes.downstreams, *([writes.uid] if writes.refresh else [])]
    if refresh:
        with context.pool.connection() as conn:
            publisher.refresh_statuses(conn, refresh)


def _releasing(writes: Writes, kube: api.KubeApi) -> api.KubeApi:
    """Who releases the finalizer: a namespace being deleted releases every one of its
    ScheduledJobs' at once, as its runs stop (200 patches for 200 runs), which must not go
    ahead of every other namespace's statuses and Events: those go at the housekeeping
    share (``k8s.client.ratelimit``; ``bench namespace_deletion``)."""
    created = api.parse_timestamp(writes.created)
    return kube.housekeeping() if kube.endings.known(writes.namespace, created) else kube


def _remove_request(kube: api.KubeApi, path: str, request: commands.Request) -> None:
    """Remove a handled request, its requester and its parameters, unless they changed
    since they were read: a newer request written meanwhile is left for its own sync."""
    operations: list[Obj] = []
    for key, value in (
        (request.annotation, request.value),
        (request.requester_annotation, request.requested_by),
        (request.parameters_annotation, request.parameters),
    ):
        if value is not None:
            pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
            operations += [
                {"op": "test", "path": pointer, "value": value},
                {"op": "remove", "path": pointer},
            ]
    try:
        kube.json_patch(path, operations)
    except api.ApiError as error:
        if not (error.not_found or error.conflict or error.status == 422):
            raise
        log.debug("%s: %s changed or gone before it was removed", path, request.annotation)


def _publish(context: Context, writes: Writes, version: str) -> bool:
    """The generation's status and Events, unless they were written already (by this
    writer or another replica's); False if the ScheduledJob is gone. ``version``: the
    object's resourceVersion as this writer last saw it."""
    current = {
        "metadata": {"resourceVersion": version},
        "status": {"conditions": list(writes.conditions)},
    }
    with context.pool.connection() as conn:
        definition = definitions.get(conn, writes.uid)
        if definition is not None and (
            definition.deleted_at is not None
            or definition.published_generation == writes.generation
        ):
            return True
        new = writes.rejected_status
        if new is None and writes.status:
            if definition is None:
                return True  # nothing stored to render (never valid: rejected_status)
            new = context.publisher.render_status(conn, definition, current)
    if new is not None and not _write_status(context, writes, definition, current, new):
        return False
    for note in writes.events:
        if _post(context, writes, note) and note.reason == "InvalidSpec":
            log.warning(
                "%s/%s generation %s rejected: %s",
                writes.namespace,
                writes.name,
                writes.generation,
                note.message,
            )
    if definition is not None:
        with context.pool.connection() as conn:
            definitions.mark_published(conn, writes.uid, writes.generation)
    return True


def _write_status(
    context: Context, writes: Writes, definition: Definition | None, current: Obj, new: Obj
) -> bool:
    """Write ``new``; False if the ScheduledJob is gone.

    A status rendered from the database names the version it was rendered against, like
    every status write (``Publisher.patch_status`` says why); the render is done without
    a read of the object, so a fleet's first sync costs no GET. Refused because the object
    changed since (409), it is read and rendered again. A never-valid spec's status comes
    from the spec alone and is written as it is."""
    path = api.scheduled_job_path(writes.namespace, writes.name, subresource="status")
    if writes.rejected_status is not None or definition is None:
        return _ignore_gone(lambda: context.kube.merge_patch(path, {"status": new}))
    try:
        context.kube.merge_patch(path, status.versioned_patch(current, new))
    except api.ApiError as error:
        if error.not_found:
            return False
        if not error.conflict:
            raise
        try:
            fresh = context.kube.get(api.scheduled_job_path(writes.namespace, writes.name))
        except api.ApiError as gone:
            if gone.not_found:
                return False
            raise
        if fresh.get("metadata", {}).get("uid") != str(writes.uid):
            return False
        with context.pool.connection() as conn:
            context.publisher.patch_status(conn, definition, fresh)
        return True
    context.publisher.announce_transitions(definition, current, new)
    return True


def _post(context: Context, writes: Writes, note: EventNote) -> bool:
    """Post the Event; False if it was posted before (by any replica) or the namespace is gone."""
    return context.publisher.post_event(
        namespace=writes.namespace,
        scheduled_job=writes.name,
        uid=writes.uid,
        name=note.name,
        event_type=note.type,
        reason=note.reason,
        message=note.message,
        at=note.at,
    )


def _ignore_gone(call: Callable[[], Obj]) -> bool:
    """``call``; False if the object is gone."""
    try:
        call()
    except api.ApiError as error:
        if error.not_found:
            return False
        raise
    return True
