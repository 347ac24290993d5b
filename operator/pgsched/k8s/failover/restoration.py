"""After a failover: runs whose row was lost entirely, restored from their Jobs.

With asynchronous replication a failover can lose a run that was created, claimed and
launched in the commits the standby never received; its Job and lease Secret are still in
the API server and its pod runs. Left alone, the new primary would do the work again under
a new id. A Job carries what the row needs (``k8s.jobside.jobs``) and its Secret a lease
the database recognises as genuine for the run id, so the failover pass
(``k8s.failover.revalidation``) calls ``pgsched.restore_lost_run``
(``sql/functions/restore_lost_run.sql``) for each Job whose run is missing: the run comes
back under its old id, RUNNING, and the new primary's unclaimed duplicate is skipped.
A Job and Secret a tenant made up restore nothing.

What is restored and what is not: docs/architecture.md, "Restoring runs lost in a
failover".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from pgsched import metrics
from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine import definitions, parameters
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import launcher
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

PAGE = 500  # Jobs per list request


@dataclass(frozen=True)
class Restored:
    run_id: int
    # restore_lost_run's (restored, forged, exists, current, no_definition, duplicate_ran),
    # or incomplete: the Job lacks what a restore needs (a Job from a release that did not
    # annotate its Jobs for restoring, k8s.names.ANNOTATION_TRIGGER)
    outcome: str
    duplicate_id: int | None = None
    duplicate_status: str | None = None


def run_once(conn: Connection, kube: api.KubeApi, *, last_id: int) -> list[Restored]:
    """Restore every run of id ``<= last_id`` (the timelines before the current one) whose
    Job exists and whose row does not; what was tried, by run id."""
    lost: dict[int, Obj] = {}
    for row in conn.execute(queries.get("namespaces_of_definitions")).fetchall():
        for job in _jobs(kube, row["namespace"]):
            run_id = _run_id(job)
            if run_id is not None and run_id <= last_id:
                lost[run_id] = job
    if not lost:
        return []
    present = conn.execute(queries.get("runs_present"), {"ids": sorted(lost)}).fetchall()
    for row in present:
        lost.pop(row["id"])
    return [_restore(conn, kube, run_id, lost[run_id]) for run_id in sorted(lost)]


def _jobs(kube: api.KubeApi, namespace: str) -> Iterator[Obj]:
    """The operator's Jobs in ``namespace`` (those with a run-id label), page by page."""
    path = api.path_of(group="batch", namespace=namespace, plural="jobs")
    params: dict[str, Any] = {"labelSelector": names.LABEL_RUN_ID, "limit": PAGE}
    while True:
        listed = kube.get(path, **params)
        yield from listed.get("items") or []
        following = (listed.get("metadata") or {}).get("continue")
        if not following:
            return
        params["continue"] = following


def _run_id(job: Obj) -> int | None:
    value = ((job.get("metadata") or {}).get("labels") or {}).get(names.LABEL_RUN_ID, "")
    return int(value) if value.isdigit() and 0 < int(value) < 2**63 else None


def _restore(conn: Connection, kube: api.KubeApi, run_id: int, job: Obj) -> Restored:
    metadata = job["metadata"]
    where = f"{metadata['namespace']}/{metadata['name']}"
    facts = _row_of(job)
    held = launcher.held_lease(kube, job)
    if facts is None or held is None:
        # Not a Job the operator made as it does (no owner, no lease Secret): nothing
        # the database could check, so nothing to restore.
        log.warning(
            "Job %s names run %s, which the database does not have, but does not"
            " carry what a restore needs (owner, annotations, lease Secret)",
            where,
            run_id,
        )
        metrics.RESTORATIONS.labels("incomplete").inc()
        return Restored(run_id, "incomplete")
    found = conn.execute(
        queries.get("restore_lost_run"),
        {
            "run_id": run_id,
            "lease": held,
            "namespace": metadata["namespace"],
            "job_name": metadata["name"],
            "parameters": _parameters(conn, job, facts["definition_id"], where),
            **facts,
        },
    ).fetchone()
    assert found is not None
    restored = Restored(run_id, found["outcome"], found["duplicate_id"], found["duplicate_status"])
    _say(restored, where)
    metrics.RESTORATIONS.labels(restored.outcome).inc()
    return restored


def _row_of(job: Obj) -> dict[str, Any] | None:
    """The row's facts the Job carries, as ``restore_lost_run`` takes them; None if the
    Job lacks any it must have."""
    metadata = job["metadata"]
    labels = metadata.get("labels") or {}
    notes = metadata.get("annotations") or {}
    owners = [
        owner["uid"]
        for owner in metadata.get("ownerReferences") or []
        if owner.get("kind") == names.KIND and owner.get("uid")
    ]
    try:
        return {
            "definition_id": UUID(owners[0]),
            "trigger": notes[names.ANNOTATION_TRIGGER],
            "scheduled_for": datetime.fromisoformat(notes[names.ANNOTATION_SCHEDULED_FOR]),
            "attempt": int(labels[names.LABEL_ATTEMPT]),
            "retry_of": _number(notes.get(names.ANNOTATION_RETRY_OF)),
            "upstream_run_id": _number(notes.get(names.ANNOTATION_UPSTREAM_RUN)),
            "request_token": notes.get(names.ANNOTATION_REQUEST_TOKEN),
        }
    except (IndexError, KeyError, ValueError):
        return None  # a Job without the trigger annotation (an older release's), or edited


def _parameters(conn: Connection, job: Obj, definition_id: UUID, where: str) -> str | None:
    """The parameters the Job's run was given (JSON), if its ScheduledJob's declarations
    accept them; None if it was given none, or (said) if they do not pass."""
    text = (job["metadata"].get("annotations") or {}).get(names.ANNOTATION_PARAMETERS)
    if text is None:
        return None  # given none
    definition = definitions.get(conn, definition_id)
    if definition is None:
        return None  # and then nothing is restored at all (no_definition)
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        problems = ["not a JSON object of names to values"]
    else:  # a value that is not a string is one of check's problems
        declared = parameters.declared(definition.spec)
        problems = [f"{p.name}: {p.message}" for p in parameters.check(declared, given)]
    if problems:
        log.warning(
            "Job %s: its parameters are not restored with its run (%s); its retries get the"
            " declared defaults",
            where,
            "; ".join(problems[:3]) + ("; …" if len(problems) > 3 else ""),
        )
        return None
    return json.dumps(given, sort_keys=True)


def _number(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _say(restored: Restored, where: str) -> None:
    run_id, duplicate = restored.run_id, restored.duplicate_id
    if restored.outcome == "restored":
        log.warning(
            "run %s: its row was lost with the database's last commits; restored from Job %s"
            " (RUNNING under the lease its pod holds)%s",
            run_id,
            where,
            f"; run {duplicate}, the new primary's duplicate of it, SKIPPED before it ran"
            if duplicate is not None
            else "",
        )
    elif restored.outcome == "duplicate_ran":
        log.error(
            "run %s: its row was lost with the database's last commits and its Job %s ran;"
            " the new primary's run %s for the same work is %s already (%s), so the run is"
            " not restored",
            run_id,
            where,
            duplicate,
            restored.duplicate_status,
            "it ran too: a duplicate execution"
            if restored.duplicate_status != "SKIPPED"
            else "it did not run",
        )
    elif restored.outcome in ("forged", "no_definition"):
        log.warning(
            "Job %s names run %s, which the database does not have; not restored (%s)",
            where,
            run_id,
            "its lease is not genuine for that run"
            if restored.outcome == "forged"
            else "its ScheduledJob is not a live one of that namespace",
        )
