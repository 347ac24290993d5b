"""The Run API's OpenAPI v3 document: what ``kubectl explain run`` reads.

The API server's aggregator asks every APIService for ``/openapi/v3`` (the paths it
serves, each with a URL whose ``hash`` changes when the document does) and proxies
``/openapi/v3/apis/runs.pgsched.dev/v1alpha1`` to us when a client wants it. kubectl finds
the Run's schema by its ``x-kubernetes-group-version-kind``; every field a Run carries is
here with what it means (``tests/unit/test_runs_api_openapi.py`` walks a Run against it).
References are local to the document, so the object metadata is described here too (the
fields a Run uses; others are kept as given). kubectl explain finds a resource's kind on
the operations of its paths, then the schema carrying that kind.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

from pgsched.k8s.runs_api.resources import API_VERSION, GROUP, KIND, VERSION, Obj

PATH = f"apis/{GROUP}/{VERSION}"
_PREFIX = "dev.pgsched.runs.v1alpha1"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_GVK = [{"group": GROUP, "version": VERSION, "kind": KIND}]


def _string(description: str, **more: object) -> Obj:
    return {"type": "string", "description": description, **more}


def _integer(description: str) -> Obj:
    return {"type": "integer", "format": "int64", "description": description}


def _time(description: str) -> Obj:
    return _string(description + " (RFC 3339, UTC)", format="date-time")


_STATUS: dict[str, Obj] = {
    "phase": _string(
        "The run's status: QUEUED (waiting to be claimed), RUNNING (claimed and launched),"
        " COMPLETED, FAILED, CANCELLED or SKIPPED (an occurrence that did not run)."
    ),
    "id": _integer("The run's id: the number its name ends with."),
    "reason": _string(
        "Why it ended so, was skipped, or is waiting (NonZeroExit, Orphaned, MissedDowntime,"
        " ConcurrencyForbid, ...); docs/runs.md lists them."
    ),
    "error": _string("What went wrong, in words (the container's last message, the reaper's)."),
    "attempt": _integer("1 for the first attempt of an occurrence, 2 for its first retry, ..."),
    "trigger": _string("What queued it: schedule, manual, retry, backfill or upstream."),
    "retryOf": _integer("The run this one retries (its previous attempt)."),
    "scheduledFor": _time("The occurrence it runs for"),
    "notBefore": _time("The jittered start, when spec.jitterSeconds delays it"),
    "startedAt": _time("When it was claimed and launched"),
    "heartbeatAt": _time("Its last heartbeat"),
    "finishedAt": _time("When it ended"),
    "durationSeconds": {"type": "number", "description": "From its start to its end."},
    "exitCode": _integer("Its workload container's exit code."),
    "cancelRequested": {"type": "boolean", "description": "Someone asked it to stop."},
    "cancelledBy": _string("Who asked it to stop: RunAPI (user), CLI, annotation, ..."),
    "retryDecision": _string("What settling decided about a retry, and why."),
    "jobName": _string("The Kubernetes Job that runs it (gone once cleaned up)."),
    "upstreamRunId": _integer("The upstream run whose outcome queued it (spec.after)."),
    "upstreamRunIds": {
        "type": "array",
        "items": {"type": "integer", "format": "int64"},
        "description": "Every upstream run of a chained run (a fan-in has several).",
    },
    "triggeredRuns": {
        "type": "array",
        "description": "The downstream runs its outcome queued.",
        "items": {
            "type": "object",
            "properties": {
                "scheduledJob": _string("The downstream ScheduledJob."),
                "runId": _integer("The downstream run."),
                "status": _string("Its status."),
            },
        },
    },
    "scheduledJobUid": _string(
        "The uid of its ScheduledJob: a ScheduledJob deleted and created again under the same"
        " name is another one, and its runs say which."
    ),
    "scheduledJobDeleted": {
        "type": "boolean",
        "description": "Its ScheduledJob was deleted; its runs stay, as history.",
    },
    "scheduledJobDeletedAt": _time("When its ScheduledJob was deleted"),
    "requestedBy": _string("Who asked for a manual run or a backfill."),
    "description": {
        "type": "object",
        "description": "Given when one run is got by name, not in lists or watches: what"
        " `pgsched describe` shows (why it waits, its pod's start, the retry chain, upstream"
        " and triggered runs, notifications), as `pgsched describe -o json` gives it, and"
        " `lines`, the lines it prints.",
        "x-kubernetes-preserve-unknown-fields": True,
    },
}

_OBJECT_META: Obj = {
    "type": "object",
    "description": "Standard object metadata. A Run's name is its Job's, <scheduledjob>-<id>,"
    " or the name it was created with through this API (the idempotency key).",
    "properties": {
        "name": _string("The run's name."),
        "generateName": _string("A prefix for a generated name, when creating."),
        "namespace": _string("The ScheduledJob's namespace."),
        "uid": _string("Unique and stable for the run."),
        "resourceVersion": _string("The place of the change a watch event carries."),
        "creationTimestamp": _time("When the run was queued"),
        "labels": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "pgsched.dev/scheduledjob: the ScheduledJob's name.",
        },
        "annotations": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Not kept: a Run is made from its ScheduledJob.",
        },
    },
    "x-kubernetes-preserve-unknown-fields": True,
}


def _run() -> Obj:
    return {
        "type": "object",
        "description": "One run of a ScheduledJob, from pgsched's history in PostgreSQL."
        " Create one to run its ScheduledJob now; delete one to cancel it.",
        "required": ["spec"],
        "properties": {
            "apiVersion": _string(f"{API_VERSION}"),
            "kind": _string(KIND),
            "metadata": {"$ref": f"#/components/schemas/{_META}.ObjectMeta"},
            "spec": {
                "type": "object",
                "description": "What runs.",
                "required": ["scheduledJob"],
                "properties": {
                    "scheduledJob": _string("The ScheduledJob to run, in the Run's namespace."),
                    "parameters": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Values for the ScheduledJob's spec.parameters, each"
                        " checked against its pattern; unset ones take their defaults.",
                    },
                },
            },
            "status": {
                "type": "object",
                "description": "The run as pgsched records it.",
                "properties": _STATUS,
            },
        },
        "x-kubernetes-group-version-kind": _GVK,
    }


def _run_list() -> Obj:
    return {
        "type": "object",
        "description": "A page of runs, newest first.",
        "properties": {
            "apiVersion": _string(API_VERSION),
            "kind": _string("RunList"),
            "metadata": {
                "type": "object",
                "properties": {
                    "resourceVersion": _string("Where a watch from this list starts."),
                    "continue": _string("The next page's token."),
                },
            },
            "items": {
                "type": "array",
                "items": {"$ref": f"#/components/schemas/{_PREFIX}.Run"},
            },
        },
        "x-kubernetes-group-version-kind": [{**_GVK[0], "kind": "RunList"}],
    }


_FIELD_VALIDATION: Obj = {
    "name": "fieldValidation",
    "in": "query",
    "description": "Unknown fields of a created Run: Strict refuses them, Warn (the default)"
    " warns, Ignore drops them.",
    "schema": {"type": "string", "uniqueItems": True},
}


def _operation(action: str, description: str, response: str) -> Obj:
    """One operation, tagged with the kind kubectl explain looks for on a resource's path."""
    return {
        "description": description,
        "operationId": f"{action}RunsPgschedDevV1alpha1Run",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _GVK[0],
        "responses": {
            "200": {
                "description": "OK",
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{_PREFIX}.{response}"}
                    }
                },
            }
        },
    }


def _paths() -> Obj:
    base = f"/{PATH}"
    listing = _operation("list", "Runs, newest first (limit/continue pages).", "RunList")
    return {
        f"{base}/runs": {"get": listing},
        f"{base}/namespaces/{{namespace}}/runs": {
            "get": listing,
            "post": {
                **_operation("post", "Run the ScheduledJob now (the name is the key).", "Run"),
                "parameters": [_FIELD_VALIDATION],
            },
        },
        f"{base}/namespaces/{{namespace}}/runs/{{name}}": {
            "get": _operation("get", "One run.", "Run"),
            "delete": _operation("delete", "Cancel the run.", "Run"),
            # Not served (405): a Run changes as its run does. Declared with the parameter
            # because kubectl decides from a kind's PATCH whether the server checks fields
            # (fieldValidation); without it kubectl checks them itself and, as a tenant
            # who may not list CRDs, cannot create a Run at all.
            "patch": {
                **_operation("patch", "Not served: answered 405.", "Run"),
                "parameters": [_FIELD_VALIDATION],
            },
        },
    }


@cache
def document() -> bytes:
    """The group-version's document, as served."""
    body = {
        "openapi": "3.0.0",
        "info": {"title": "pgsched Run API", "version": VERSION},
        "paths": _paths(),
        "components": {
            "schemas": {
                f"{_PREFIX}.Run": _run(),
                f"{_PREFIX}.RunList": _run_list(),
                f"{_META}.ObjectMeta": _OBJECT_META,
            }
        },
    }
    return json.dumps(body, sort_keys=True).encode()


def discovery() -> Obj:
    """``/openapi/v3``: the one path served, with the hash the aggregator caches by."""
    digest = hashlib.sha512(document()).hexdigest()[:32].upper()
    return {"paths": {PATH: {"serverRelativeURL": f"/openapi/v3/{PATH}?hash={digest}"}}}
