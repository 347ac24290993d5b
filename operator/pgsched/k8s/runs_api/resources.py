"""Runs as Kubernetes objects: the ``Run`` kind, its list, its Table, and discovery.

A Run's name is its Job's (``<scheduledjob>-<run id>``, ``names.job_name``), so
``kubectl get runs`` and ``kubectl get jobs`` name a run the same way; the run id is the
number after the last dash. ``status`` is the run as every other JSON answer gives it
(``engine.run_json``), with ``phase`` its status, as Pods and Jobs say it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pgsched import wording
from pgsched.engine import run_json, runs
from pgsched.engine.models import Run
from pgsched.k8s import names

GROUP = f"runs.{names.GROUP}"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Run"
PLURAL = "runs"
SINGULAR = "run"
VERBS = ["get", "list", "watch", "create", "delete"]
# uids derived from run ids: stable across replicas and restarts, unique per run.
_UID_NAMESPACE = uuid.UUID("0b6c3f0e-5f1e-4d2a-9a43-7d6a3c1f2e55")

Obj = dict[str, Any]
# What the JSON of a run says that a Run says elsewhere: its status is the phase, its
# parameters are in the spec.
_IN_SPEC_OR_PHASE = frozenset({"status", "parameters"})


# A run created through the Run API is queued with this request token before its name:
# the name is the idempotency key, and the run keeps it.
TOKEN_PREFIX = f"{GROUP}/"


@dataclass(frozen=True)
class StoredRun:
    """A run and the ScheduledJob it belongs to, as the store reads them."""

    namespace: str
    scheduled_job: str
    scheduled_job_deleted_at: datetime | None
    run: Run
    requested_by: str | None = None  # who asked for a manual run or a backfill

    @property
    def name(self) -> str:
        """The name it was created with through the Run API, else its Job's."""
        token = self.run.request_token or ""
        if token.startswith(TOKEN_PREFIX):
            return token[len(TOKEN_PREFIX) :]
        return names.job_name(self.scheduled_job, self.run.id)


def run_id_of(name: str) -> int | None:
    """The run id a Run's name ends with, or None if it ends with none."""
    tail = name.rpartition("-")[2]
    return int(tail) if tail.isdigit() and len(tail) <= 18 else None


def run_object(found: StoredRun, resource_version: str = "") -> Obj:
    """The Run; ``resource_version`` is the place of the change a watch event carries it
    for (a Run read otherwise has none: nothing updates a Run by its version)."""
    run = found.run
    metadata = _metadata(found, resource_version)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "scheduledJob": found.scheduled_job,
            "parameters": run.parameters or {},
        },
        "status": {
            "phase": run.status,
            **{
                key: _json(value)
                for key, value in run_json.summary(run).items()
                if key not in _IN_SPEC_OR_PHASE
            },
            "scheduledJobUid": str(run.definition_id),
            "scheduledJobDeleted": found.scheduled_job_deleted_at is not None,
            "scheduledJobDeletedAt": timestamp(found.scheduled_job_deleted_at),
            **_requester(found),
        },
    }


def _metadata(found: StoredRun, resource_version: str = "") -> Obj:
    metadata: Obj = {
        "name": found.name,
        "namespace": found.namespace,
        "uid": str(uuid.uuid5(_UID_NAMESPACE, str(found.run.id))),
        "creationTimestamp": timestamp(found.run.created_at),
        "labels": {names.LABEL_SCHEDULED_JOB: found.scheduled_job},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return metadata


def _requester(found: StoredRun) -> Obj:
    """``requestedBy`` of a run someone asked for (manual, backfill), as describe says it."""
    if found.run.trigger not in runs.REQUESTED_TRIGGERS:
        return {}
    return {"requestedBy": found.requested_by or runs.UNKNOWN_REQUESTER}


def cancellation_uid(run_id: int) -> str:
    """The uid a delete (a cancel) of a run answers with: not the Run's own (module doc of
    ``server``, ``_delete``)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"cancel/{run_id}"))


def run_list(items: list[Obj], continue_token: str | None, resource_version: str) -> Obj:
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {"apiVersion": API_VERSION, "kind": "RunList", "metadata": metadata, "items": items}


# What `kubectl get runs` prints; priority 1 columns only with -o wide.
COLUMNS: list[Obj] = [
    {"name": "Name", "type": "string", "format": "name", "priority": 0},
    {"name": "ScheduledJob", "type": "string", "priority": 0},
    {"name": "Status", "type": "string", "priority": 0},
    {"name": "Reason", "type": "string", "priority": 0},
    {"name": "Trigger", "type": "string", "priority": 0},
    {"name": "Attempt", "type": "integer", "priority": 0},
    {"name": "Scheduled", "type": "string", "priority": 0},
    {"name": "Started", "type": "string", "priority": 1},
    {"name": "Duration", "type": "string", "priority": 0},
    {"name": "Age", "type": "string", "priority": 0},
    {"name": "Job", "type": "string", "priority": 1},
    {"name": "Exit code", "type": "integer", "priority": 1},
    {"name": "Error", "type": "string", "priority": 1},
]
_DESCRIPTIONS = {
    "Name": "the run's name: its Job's, <scheduledjob>-<run id>",
    "Reason": "why it ended so, or why it was skipped or is waiting",
    "Scheduled": "the occurrence it runs for (UTC)",
    "Duration": "from its start to its end, or so far",
}


def table(
    found: list[StoredRun],
    *,
    now: datetime,
    continue_token: str | None,
    objects: str,
    resource_version: str = "",
) -> Obj:
    """A meta.k8s.io/v1 Table (what kubectl asks for). ``objects``: None, Metadata or
    Object, as the request's ``includeObject`` says (kubectl's default: Metadata)."""
    rows = []
    for item in found:
        run = item.run
        row: Obj = {
            "cells": [
                item.name,
                item.scheduled_job,
                run.status,
                run.reason or "",
                run.trigger,
                run.attempt,
                timestamp(run.scheduled_for),
                timestamp(run.started_at) or "",
                _duration(run, now),
                age(now - run.created_at),
                run.k8s_job_name or "",
                run.exit_code if run.exit_code is not None else "",
                (run.error or "")[:120],
            ]
        }
        if objects == "Object":
            row["object"] = run_object(item, resource_version)
        elif objects != "None":
            row["object"] = {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": _metadata(item, resource_version),
            }
        rows.append(row)
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "Table",
        "metadata": metadata,
        "columnDefinitions": [
            {**column, "description": _DESCRIPTIONS.get(column["name"], "")} for column in COLUMNS
        ],
        "rows": rows,
    }


def _duration(run: Run, now: datetime) -> str:
    if run.started_at is None:
        return ""
    if run.finished_at is None:
        return wording.duration(now - run.started_at) if run.status == "RUNNING" else ""
    return wording.duration(run.finished_at - run.started_at)


def age(span: timedelta) -> str:
    """As kubectl writes an AGE: ``45s``, ``3m20s``, ``12m``, ``5h10m``, ``20h``, ``3d4h``,
    ``40d`` (the two largest units while the first is small)."""
    seconds = max(int(span.total_seconds()), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def timestamp(instant: datetime | None) -> str | None:
    """RFC 3339 in UTC, to the second, as Kubernetes writes times."""
    if instant is None:
        return None
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def resource_list() -> Obj:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {
                "name": PLURAL,
                "singularName": SINGULAR,
                "namespaced": True,
                "kind": KIND,
                "verbs": VERBS,
                "categories": ["pgsched"],
            }
        ],
    }


def group() -> Obj:
    version = {"groupVersion": API_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def group_list() -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]}


def status(code: int, reason: str, message: str, *, details: Obj | None = None) -> Obj:
    """A meta/v1 Status: a refusal's body (kubectl prints its message), or, with reason ""
    and code 200, a success's."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "code": code,
    }
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return body
