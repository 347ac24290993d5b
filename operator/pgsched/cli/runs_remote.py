"""``pgsched runs`` and ``describe`` without a database: through the Run API (docs/runs-api.md).

A tenant has a kubeconfig, not the shared database's password. Given no DSN, ``pgsched
runs`` asks the API server, as the kubeconfig's user, for the ScheduledJob (its time zone)
and for its Runs, newest first: RBAC (``list runs`` in the namespace) decides, and the API
server's audit log records it. The rows are the same as read from the database, so the
table and ``-o json`` are too; only the instants are whole seconds, as the Kubernetes API
gives them (durations come from the run's own ``durationSeconds``). ``describe`` gets the
one Run, whose ``status.description`` the Run API makes with the database path's own code
(``engine.run_description``): the same lines and JSON.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched.cli import common, target
from pgsched.cli.common import CommandError
from pgsched.engine import chain, run_json
from pgsched.engine.models import Run
from pgsched.k8s import names

if TYPE_CHECKING:  # the Kubernetes client loads only when the API is used (bench.cli_startup)
    from pgsched.k8s.client import api

# Status fields of a Run, by the Run model's names (k8s/runs_api/resources.py writes them).
_FIELDS = {
    "id": "id",
    "reason": "reason",
    "error": "error",
    "attempt": "attempt",
    "trigger": "trigger",
    "retryOf": "retry_of",
    "exitCode": "exit_code",
    "cancelRequested": "cancel_requested",
    "cancelledBy": "cancelled_by",
    "retryDecision": "retry_decision",
    "jobName": "k8s_job_name",
    "upstreamRunId": "upstream_run_id",
}
_INSTANTS = {
    "scheduledFor": "scheduled_for",
    "notBefore": "not_before",
    "startedAt": "started_at",
    "heartbeatAt": "heartbeat_at",
    "finishedAt": "finished_at",
}


@dataclass
class History:
    """What ``pgsched runs`` shows, wherever it was read."""

    key: str  # namespace/name
    time_zone: str
    scheduled_jobs: list[tuple[UUID, datetime | None]]  # (uid, deleted at)
    runs: list[Run]
    triggered: dict[int, list[chain.Triggered]] = field(default_factory=dict)
    upstreams: dict[int, list[int]] = field(default_factory=dict)


def through_api(args: argparse.Namespace, *, to: str) -> bool:
    """Whether to read through the Run API: no database is named (``--dsn``,
    ``PGSCHED_DSN``, ``PGSCHED_DSN_FILE``). Without a kubeconfig either, a usage error saying
    both ways (``to``: what the kubeconfig is for)."""
    if common.has_database(args):
        return False
    if not target.has_kubeconfig(args.kubeconfig):
        raise CommandError(
            "no database and no kubeconfig: pass --dsn (or set PGSCHED_DSN), or a kubeconfig"
            f" (--kubeconfig, KUBECONFIG) {to}",
            code=2,
        )
    return True


def history(
    kube: api.KubeApi,
    namespace: str,
    name: str,
    *,
    statuses: list[str] | None,
    limit: int,
    include_deleted: bool,
) -> History:
    key = f"{namespace}/{name}"
    scheduled_job = _scheduled_job(kube, namespace, name, include_deleted=include_deleted)
    found: list[dict[str, Any]] = []
    for status in statuses or [""]:
        found += _runs(kube, namespace, name, status, limit)
    live = str(scheduled_job["metadata"]["uid"]) if scheduled_job else None
    if not include_deleted:
        found = [item for item in found if item["status"].get("scheduledJobUid") == live]
    found.sort(key=lambda item: -int(item["status"]["id"]))
    found = found[:limit]
    history = History(
        key=key,
        time_zone=(scheduled_job or {}).get("spec", {}).get("timeZone") or "UTC",
        scheduled_jobs=_scheduled_jobs(found, live),
        runs=[run_from_object(item) for item in found],
    )
    for item, run in zip(found, history.runs, strict=True):
        history.triggered[run.id] = [
            chain.Triggered(run.id, int(down["runId"]), down["scheduledJob"], down["status"])
            for down in item["status"].get("triggeredRuns") or []
        ]
        history.upstreams[run.id] = [int(up) for up in item["status"].get("upstreamRunIds") or []]
    return history


def description(kube: api.KubeApi, namespace: str, run_id: int) -> dict[str, Any]:
    """What ``pgsched describe`` says of run ``run_id`` of ``namespace``, as the Run API
    gives it (``status.description`` of the Run got by name): the document of ``describe
    -o json`` and its ``lines``."""
    from pgsched.k8s.client import api

    path = runs_path(namespace)
    name = run_by_id(kube, namespace, run_id)["metadata"]["name"]
    try:
        found = kube.get(f"{path}/{name}")
    except api.ApiError as error:
        raise refused(error, f"get runs in {namespace}") from None
    described = (found.get("status") or {}).get("description")
    if not isinstance(described, dict):
        raise CommandError(
            "this cluster's Run API gives no description of a run (an older pgsched):"
            " pass --dsn, or ask its platform team to upgrade"
        )
    return described


def run_by_id(
    kube: api.KubeApi,
    namespace: str,
    run_id: int,
    *,
    scheduled_job: str = "SJ",
    otherwise: str = "pass --dsn",
) -> dict[str, Any]:
    """The Run whose id is ``run_id`` in ``namespace`` (a list by ``status.id``), or a
    CommandError saying what to check; ``scheduled_job`` and ``otherwise`` fill the advice."""
    from pgsched.k8s.client import api

    try:
        page = kube.get(runs_path(namespace), fieldSelector=f"status.id={run_id}", limit=1)
    except api.ApiError as error:
        raise refused(error, f"list runs in {namespace}", otherwise=otherwise) from None
    items = page.get("items") or []
    if not items:
        raise CommandError(
            f"no run with id {run_id} in namespace {namespace}: check the id (`pgsched runs"
            f" {scheduled_job} -n {namespace}`) and the namespace (-n NAMESPACE)"
        )
    return dict(items[0])


def run_from_object(found: dict[str, Any]) -> Run:
    """A Run object as the Run model the CLI renders (no lease token: the API never gives it)."""
    status = found["status"]
    row: dict[str, Any] = {model: status.get(key) for key, model in _FIELDS.items()}
    row.update({model: run_json.from_utc_iso(status.get(key)) for key, model in _INSTANTS.items()})
    if row["started_at"] is not None and status.get("durationSeconds") is not None:
        row["finished_at"] = row["started_at"] + timedelta(seconds=status["durationSeconds"])
    row.update(
        status=status["phase"],
        definition_id=UUID(status["scheduledJobUid"]),
        created_at=run_json.from_utc_iso(found["metadata"]["creationTimestamp"]),
        parameters=found.get("spec", {}).get("parameters") or None,
        cancel_requested=bool(status.get("cancelRequested")),
        deadline_at=None,
        request_token=None,
        lease_token=None,
        cancel_requested_at=None,
        retry_hint=None,
        settled_at=None,
    )
    return Run.from_row(row)


def _scheduled_job(
    kube: api.KubeApi, namespace: str, name: str, *, include_deleted: bool
) -> dict[str, Any] | None:
    from pgsched.k8s.client import api

    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}/{name}"
    try:
        return kube.get(path)
    except api.ApiError as error:
        if error.not_found and include_deleted:
            return None  # deleted: its runs are still listed
        if error.not_found:
            raise CommandError(
                f"no ScheduledJob {namespace}/{name}: check the name and namespace (`kubectl"
                f" get sj -n {namespace}`); if it was deleted, --include-deleted lists its runs"
            ) from None
        raise refused(error, f"get scheduledjobs in {namespace}") from None


def _runs(
    kube: api.KubeApi, namespace: str, name: str, status: str, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` runs of this name (in ``status``, if given), newest first."""
    from pgsched.k8s.client import api

    path = runs_path(namespace)
    params: dict[str, Any] = {"labelSelector": f"{names.LABEL_SCHEDULED_JOB}={name}"}
    if status:
        params["fieldSelector"] = f"status.phase={status}"
    found: list[dict[str, Any]] = []
    token: str | None = None
    while len(found) < limit:
        try:
            page = kube.get(path, **params, limit=limit, **{"continue": token})
        except api.ApiError as error:
            raise refused(error, f"list runs in {namespace}") from None
        found += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            break
    return found


def runs_path(namespace: str) -> str:
    from pgsched.k8s.runs_api import resources

    return f"/apis/{resources.API_VERSION}/namespaces/{namespace}/{resources.PLURAL}"


def refused(error: api.ApiError, what: str, *, otherwise: str = "pass --dsn") -> CommandError:
    """The Run API's refusal in words: not served, not allowed (``what``), or another
    error; ``otherwise``: the other way to do it."""
    if error.status == 404:
        return CommandError(
            "this cluster does not serve the Run API (runs.pgsched.dev): ask its platform"
            f" team to install the chart with runsApi.enabled=true, or {otherwise}"
        )
    if error.status == 403:
        return CommandError(
            f"your kubeconfig's user may not {what}: {error.message} (a Role granting it:"
            f" docs/runs-api.md, 'Who sees what'), or {otherwise}"
        )
    return CommandError(f"the API server refused: {error}")


def _scheduled_jobs(
    found: list[dict[str, Any]], live: str | None
) -> list[tuple[UUID, datetime | None]]:
    seen: dict[str, datetime | None] = {}
    for item in found:
        status = item["status"]
        seen.setdefault(
            status["scheduledJobUid"], run_json.from_utc_iso(status.get("scheduledJobDeletedAt"))
        )
    if live is not None:
        seen.setdefault(live, None)
    return [(UUID(uid), deleted_at) for uid, deleted_at in seen.items()]
