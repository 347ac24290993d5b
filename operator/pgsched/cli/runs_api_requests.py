"""``run-now`` and ``cancel`` with ``--via runs-api``: a Run created or deleted through the
cluster's Run API (docs/runs-api.md) instead of a request annotation on the ScheduledJob.

What it changes for the person asking: the permission is the Run's own (``create runs``
to start one, ``delete runs`` to cancel one) instead of ``patch scheduledjobs``, which
also lets its holder change the job's image and command, so a team can let its CI start
runs without letting it edit jobs; and the answer is synchronous: the run's id, or the
refusal naming the field (a 422 for a bad parameter). The idempotency key is the Run's
name (``--token``): one name is one run however often it is sent. Names and annotation
tokens are kept apart by the operator, so a pipeline that retries a step keeps one path
(docs/cli.md, "Through the Run API").
"""

from __future__ import annotations

import argparse
import secrets
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgsched.cli import runs_remote
from pgsched.cli.common import CommandError

if TYPE_CHECKING:
    from pgsched.k8s.client import api

ANNOTATION, RUNS_API = "annotation", "runs-api"
OTHERWISE = "use --via annotation"
# Letters only: a name ending in -<digits> is how runs are named by id, never a created one.
_SUFFIX = string.ascii_lowercase


def add_via_flag(parser: argparse.ArgumentParser, *, verb: str) -> None:
    parser.add_argument(
        "--via",
        choices=(ANNOTATION, RUNS_API),
        default=ANNOTATION,
        help=f"annotation (default): a request annotation on the ScheduledJob (RBAC: patch"
        f" scheduledjobs); runs-api: {verb} a Run through the cluster's Run API (RBAC:"
        f" {verb} runs.runs.pgsched.dev; the chart's runsApi.enabled=true), answered at once",
    )


def chosen(args: argparse.Namespace) -> bool:
    """Whether ``--via runs-api`` was asked for; a usage error beside ``--database``."""
    if args.via != RUNS_API:
        return False
    if args.database:
        raise CommandError(
            "--via runs-api goes through the API server and --database around it: give one",
            code=2,
        )
    return True


@dataclass(frozen=True)
class Created:
    name: str  # the Run's name: the request's key
    run: dict[str, Any]  # the Run as the API answered
    created: bool  # False: a Run of that name existed, nothing new was queued


def create(
    kube: api.KubeApi,
    namespace: str,
    scheduled_job: str,
    *,
    token: str | None,
    parameters: dict[str, str],
) -> Created:
    """Create the Run ``token`` names (a fresh name without one: chosen here, not by the
    server's generateName, so a create the client retries after a lost answer is still
    one request)."""
    from pgsched.k8s.client import api
    from pgsched.k8s.runs_api import resources

    name = token or f"{scheduled_job[:240]}-{''.join(secrets.choice(_SUFFIX) for _ in range(8))}"
    body = {
        "apiVersion": resources.API_VERSION,
        "kind": resources.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scheduledJob": scheduled_job, "parameters": parameters},
    }
    try:
        answer, status = kube.create_answered(runs_remote.runs_path(namespace), body)
    except api.ApiError as error:
        if error.status == 422:
            raise CommandError(f"the Run API refused the run: {error.message}", code=2) from None
        raise runs_remote.refused(
            error, f"create runs in {namespace}", otherwise=OTHERWISE
        ) from None
    return Created(name, answer, created=status == 201)


def describe_created(created: Created, namespace: str) -> str:
    status = created.run.get("status") or {}
    run = f"run {status.get('id')} of {namespace}/{created.run['spec']['scheduledJob']}"
    if created.created:
        who = status.get("requestedBy")
        by = f", requested by {who}" if who else ""
        return f"{run} queued as Run {created.name} (through the Run API{by})"
    return f"Run {created.name} exists already: {run} ({status.get('phase')}); nothing new queued"


@dataclass(frozen=True)
class Cancelled:
    before: dict[str, Any]  # the Run before the delete
    after: dict[str, Any]  # and after it
    message: str  # the Run API's answer


def cancel(kube: api.KubeApi, namespace: str, scheduled_job: str, run_id: int) -> Cancelled:
    """Delete (cancel) run ``run_id`` of ``scheduled_job``: found by id, checked to be that
    job's, then deleted by name."""
    from pgsched.k8s import names
    from pgsched.k8s.client import api

    path = runs_remote.runs_path(namespace)
    found = runs_remote.run_by_id(
        kube, namespace, run_id, scheduled_job=scheduled_job, otherwise=OTHERWISE
    )
    owner = (found["metadata"].get("labels") or {}).get(names.LABEL_SCHEDULED_JOB)
    if owner != scheduled_job:
        raise CommandError(f"run {run_id} is not a run of {scheduled_job} (it is {owner}'s)")
    name = found["metadata"]["name"]
    try:
        answer = kube.delete(f"{path}/{name}")
        after = kube.get(f"{path}/{name}")
    except api.ApiError as error:
        if error.conflict:  # it ended before the delete: nothing to cancel
            return Cancelled(found, found, error.message)
        raise runs_remote.refused(
            error, f"delete runs in {namespace}", otherwise=OTHERWISE
        ) from None
    return Cancelled(found, after, str(answer.get("message") or ""))


def describe_cancelled(cancelled: Cancelled) -> str:
    before, after = cancelled.before["status"], cancelled.after["status"]
    run = f"run {after.get('id')}"
    if before.get("phase") == after.get("phase") and after.get("phase") != "RUNNING":
        return f"{run}: already {after.get('phase')}; nothing to cancel"
    if after.get("phase") == "CANCELLED":
        return f"{run}: was {before.get('phase')}, now CANCELLED (through the Run API)"
    if before.get("cancelRequested"):
        return f"{run}: cancellation was already requested; it is stopping"
    return f"{run}: running, asked to stop (it ends CANCELLED when it has; through the Run API)"
