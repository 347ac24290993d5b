"""Our Jobs' ends become their runs' outcomes.

The Job watch (label ``pgsched.dev/run-id``) selects, on its own thread, the events that
can end a run — a Job that finished, or one deleted — and drops the rest (a Job's life is a
dozen events, and a stampede is thousands of Jobs: nothing of those is kept or queued).
A worker then records the outcome, fenced (``outcomes.record``): only the claim the Job was
launched for can be ended by it, so a replayed event, a second replica or the resync racing
it change nothing. The Job's pods are read only when the run is still the Job's to end.
A database or API error puts the Job back to be tried again.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgsched import logs, metrics
from pgsched.k8s import names
from pgsched.k8s.client import api, controller, reads
from pgsched.k8s.client.watch import Event
from pgsched.k8s.jobside import outcomes
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


def select(event: Event) -> tuple[str, Event] | None:
    """The events that may end a run, keyed by the Job's uid; None for the rest."""
    body = event.object
    metadata = body.get("metadata") or {}
    if event.type != "DELETED" and not outcomes.finished(body):
        return None
    run_id = (metadata.get("labels") or {}).get(names.LABEL_RUN_ID, "")
    if not run_id.isdigit() or not names.job_lease_fingerprint(metadata.get("annotations")):
        return None
    return str(metadata.get("uid")), event


def record(pool: ConnectionPool[Any], kube: api.KubeApi, event: Event) -> float | None:
    """Record the outcome the event shows; None when done, else seconds until a retry."""
    body: Obj = event.object
    metadata = body["metadata"]
    labels = metadata.get("labels") or {}
    run_id = labels[names.LABEL_RUN_ID]
    fingerprint = names.job_lease_fingerprint(metadata.get("annotations"))
    assert fingerprint is not None  # select() let only such Jobs through
    log_run = logs.for_labels(
        log,
        run_id=run_id,
        namespace=metadata["namespace"],
        name=labels.get(names.LABEL_SCHEDULED_JOB),
        attempt=labels.get(names.LABEL_ATTEMPT),
    )
    try:
        with pool.connection() as conn:
            outcome = outcomes.record(
                conn,
                int(run_id),
                fingerprint,
                job=body,
                pods=lambda: _pods(kube, metadata, body),
                deleted=event.type == "DELETED",
                namespace_ending=lambda: reads.namespace_ending(
                    kube, metadata["namespace"], created=metadata.get("creationTimestamp")
                ),
                logger=log_run,
            )
    except (psycopg.Error, api.ApiError) as error:
        if isinstance(error, psycopg.Error):
            metrics.DB_ERRORS.labels("handlers").inc()
        log_run.warning(
            "run %s: could not record the outcome of Job %s yet, will retry: %s",
            run_id,
            metadata["name"],
            error,
        )
        return controller.RETRY_SECONDS
    if outcome is not None:
        log_run.info(
            "run %s: Job %s ended, run %s %s",
            run_id,
            metadata["name"],
            outcome.status,
            outcome.reason or "",
        )
    return None


def _pods(kube: api.KubeApi, metadata: Obj, job: Obj) -> list[Obj]:
    """The Job's pods; none read for a Job of a namespace seen going
    (``k8s.client.endings``) that did not succeed: its run ends CANCELLED by the
    namespace's deletion whatever they say, but for an exit code in its message. Read, a
    namespace of 200 running runs was 200 urgent requests at once as its pods were deleted
    and its Jobs failed, ahead of every other namespace's launches and statuses
    (``bench namespace_deletion``)."""
    namespace = str(metadata["namespace"])
    created = api.parse_timestamp(metadata.get("creationTimestamp"))
    if not outcomes.succeeded(job) and kube.endings.known(namespace, created):
        return []
    return reads.pods_of_job(kube, namespace, str(metadata["name"]))
