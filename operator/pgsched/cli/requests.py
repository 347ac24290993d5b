"""Asking the operator through the Kubernetes API server: the default path of ``run-now``,
``cancel``, ``backfill``, ``suspend`` and ``resume``.

The CLI writes a request annotation on the ScheduledJob (``pgsched.dev/run-now``, ...;
``pgsched.k8s.scheduledjobs.commands`` carries them out) with its requester, the user the
API server says this kubeconfig is (a SelfSubjectReview). So the request is subject to
Kubernetes RBAC, lands in the API server's audit log, and needs no database credentials.

Then it waits (``--timeout``) for the operator to take the request, and reports a refusal
(the operator's Warning Event, whose name the CLI can predict) or a wait for a lagging
standby (``WaitingForStandby``). A request of someone else's still on the object is never
overwritten. ``--database`` is the administrator's path instead: straight to the database,
outside RBAC and the audit log; it says so on stderr every time.

In full: docs/cli.md, "Requests through the API server".
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgsched.cli.common import CommandError

if TYPE_CHECKING:
    from pgsched.k8s.client import api

BYPASS = (
    "--database: acting on the database directly with the schema owner's DSN; Kubernetes"
    " RBAC and the API server's audit log do not apply (an administrator's path)"
)
POLL_SECONDS = 0.25
RESOURCE = "scheduledjobs.pgsched.dev"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--database`` and ``--timeout``, for the commands that change things."""
    parser.add_argument(
        "--database",
        action="store_true",
        help="administrators: act on the database directly with the DSN (--dsn or"
        " PGSCHED_DSN), BYPASSING Kubernetes RBAC and the API server's audit log. Without"
        " it the request goes through the Kubernetes API server (needs get and patch on"
        " scheduledjobs.pgsched.dev in the namespace)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the operator to take a request sent through the API"
        " server (default: 30)",
    )


def add_parameter_flag(parser: argparse.ArgumentParser) -> None:
    """``--param name=value`` (repeatable): values of the ScheduledJob's spec.parameters."""
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a value for one of the job's spec.parameters (repeatable), e.g. --param"
        " region=us-east-1; its workload gets it as PGSCHED_PARAM_<NAME>",
    )


def parameter_values(args: argparse.Namespace) -> dict[str, str]:
    """The ``--param`` flags as a mapping; CommandError (usage) if one is not name=value."""
    from pgsched.engine import parameters

    try:
        return parameters.parse_assignments(args.param)
    except ValueError as error:
        raise CommandError(str(error), code=2) from None


def check_parameters(spec: dict[str, Any], values: dict[str, str], subject: str) -> None:
    """Refuse values the job's spec.parameters do not allow, each problem with its
    ``--param`` and an example, before anything is written (the --database path; through
    the API server the operator checks them and the refusal comes back as its Event)."""
    from pgsched.engine import parameters

    declared = parameters.declared(spec)
    problems = parameters.check(declared, values)
    if problems:
        right = " ".join(f"--param {k}={v}" for k, v in parameters.example(declared).items())
        lines = [f"--param {item.name}: {item.message}" for item in problems]
        raise CommandError(
            f"{subject}: " + "; ".join(lines) + f" (example: {right}); nothing was queued",
            code=2,
        )


def announce_bypass() -> None:
    print(f"note: {BYPASS}", file=sys.stderr)


def database_requester() -> str:
    """``CLI (user@host)``: who used ``--database``, as far as this machine knows (the
    database only knows the schema owner's login); recorded as the requester of the runs
    it queues and as who cancelled."""
    from pgsched.engine import runs

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container with an arbitrary uid)
        user = f"uid {os.getuid()}"
    return f"{runs.BY_CLI} ({user}@{socket.gethostname()})"


def describe(sent: Sent, what: str, *, timeout: float) -> str:
    """One line saying what was sent, by whom, and whether the operator took it."""
    who = f"requested by {sent.requested_by}" if sent.requested_by else "requester unknown"
    if sent.taken:
        taken = "the operator took it"
    elif sent.waiting:
        taken = (
            f"the operator carried it out but has not removed it after {timeout:g} s: it"
            " waits for the database's standby to receive it (a failover before then has"
            " it carried out again, once)"
        )
    else:
        taken = f"the operator has not taken it after {timeout:g} s; it will when it runs"
    return f"{what} of {sent.scheduled_job} sent through the Kubernetes API server ({who}); {taken}"


@dataclass(frozen=True)
class Sent:
    scheduled_job: str  # namespace/name
    requested_by: str | None
    taken: bool  # the operator removed the request within the timeout
    waiting: bool = False  # not removed, but carried out: kept until the standbys have it


def scheduled_job(kube: api.KubeApi, namespace: str, name: str) -> dict[str, Any]:
    """The ScheduledJob, or a CommandError saying why not (missing, or not allowed)."""
    from pgsched.k8s.client import api

    try:
        return kube.get(api.scheduled_job_path(namespace, name))
    except api.ApiError as error:
        if error.not_found:
            raise CommandError(
                f"no ScheduledJob {namespace}/{name} in Kubernetes: check the name and"
                f" namespace (`kubectl get sj -n {namespace}`)"
            ) from None
        raise _refused(error, "get", namespace) from None


def patch_spec(
    kube: api.KubeApi,
    obj: dict[str, Any],
    spec: dict[str, Any],
    *,
    annotations: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Merge-patch the ScheduledJob's spec (and ``annotations``: None removes one), naming
    the resourceVersion read."""
    from pgsched.k8s.client import api

    meta = obj["metadata"]
    path = api.scheduled_job_path(meta["namespace"], meta["name"])
    metadata: dict[str, Any] = {"resourceVersion": meta["resourceVersion"]}
    if annotations:
        metadata["annotations"] = annotations
    body = {"metadata": metadata, "spec": spec}
    try:
        return kube.merge_patch(path, body)
    except api.ApiError as error:
        raise _refused(error, "patch", meta["namespace"]) from None


def send(
    kube: api.KubeApi,
    args: argparse.Namespace,
    obj: dict[str, Any],
    annotation: str,
    value: str,
    *,
    parameters: dict[str, str] | None = None,
) -> Sent:
    """Write the request ``annotation=value`` and its requester on the ScheduledJob (and,
    for run-now and backfill, its ``parameters``, or the removal of stale ones), wait for
    the operator to take it; CommandError if refused (by RBAC, admission or the
    operator)."""
    from pgsched.k8s import names
    from pgsched.k8s.client import api
    from pgsched.k8s.scheduledjobs import commands

    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    path = api.scheduled_job_path(namespace, name)
    who = whoami(kube)
    requester = names.requested_by_annotation(annotation)
    written_too: dict[str, str | None] = {requester: who}
    if annotation in names.PARAMETERIZED_COMMANDS:
        # None (a merge patch's null) removes values a request of someone else's left.
        given = commands.parameters_value(parameters) if parameters else None
        written_too[names.parameters_annotation(annotation)] = given
    deadline = time.monotonic() + args.timeout
    while True:
        waiting = (meta.get("annotations") or {}).get(annotation)
        if waiting is None:
            body = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "annotations": {annotation: value, **written_too},
                }
            }
            try:
                written = kube.merge_patch(path, body)
                break
            except api.ApiError as error:
                if not error.conflict:  # 409: changed since it was read: read it again
                    raise _refused(error, "patch", namespace) from None
        elif time.monotonic() > deadline:
            raise CommandError(
                f"an earlier {annotation}={waiting} request on {namespace}/{name} is still"
                f" waiting for the operator after {args.timeout:g} s: is the operator"
                " running? (`pgsched doctor`); nothing was written"
            )
        else:
            time.sleep(POLL_SECONDS)
        meta = scheduled_job(kube, namespace, name)["metadata"]
    version = written["metadata"]["resourceVersion"]
    taken = _wait_taken(kube, path, annotation, value, deadline)
    if taken:
        _raise_if_refused(kube, namespace, name, annotation, version)
    waiting = not taken and (
        _event(kube, namespace, commands.waiting_event_name(name, annotation, version)) is not None
    )
    return Sent(f"{namespace}/{name}", who, taken, waiting)


def whoami(kube: api.KubeApi) -> str | None:
    """The user name the API server authenticates this kubeconfig as (SelfSubjectReview,
    Kubernetes 1.28+); None where the API server does not say."""
    from pgsched.k8s.client import api

    try:
        review = kube.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except api.ApiError:
        return None
    username = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    return str(username) if username else None


def _wait_taken(kube: api.KubeApi, path: str, annotation: str, value: str, deadline: float) -> bool:
    while time.monotonic() <= deadline:
        current = kube.get(path)
        if (current["metadata"].get("annotations") or {}).get(annotation) != value:
            return True
        time.sleep(POLL_SECONDS)
    return False


def _raise_if_refused(
    kube: api.KubeApi, namespace: str, name: str, annotation: str, version: str
) -> None:
    """The operator's Warning Event for this very write, if it refused it (reading Events
    needs ``get events``: without it, a refusal shows in ``kubectl describe sj``)."""
    from pgsched.k8s import names
    from pgsched.k8s.scheduledjobs import commands

    for field in (
        annotation,
        names.requested_by_annotation(annotation),
        names.parameters_annotation(annotation),
    ):
        found = _event(kube, namespace, commands.event_name(name, field, version))
        if found is not None:
            raise CommandError(f"the operator refused the request: {found.get('message')}")


def _event(kube: api.KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The Event ``name``; None if there is none (or this user may not read Events)."""
    from pgsched.k8s.client import api

    try:
        return kube.get(api.path_of(namespace=namespace, plural="events", name=name))
    except api.ApiError:
        return None


def _refused(error: api.ApiError, verb: str, namespace: str) -> CommandError:
    # RBAC's 403 says "User ... cannot patch resource ..."; an admission policy's 403
    # (the requester policy) says why it denied the request: shown as it is.
    if error.status == 403 and f"cannot {verb} resource" in error.message:
        return CommandError(
            f"Kubernetes RBAC refused: you may not {verb} {RESOURCE} in namespace"
            f" {namespace} (this needs the `{verb}` permission on {RESOURCE}; check with"
            f" `kubectl auth can-i {verb} {RESOURCE} -n {namespace}`). Administrators may"
            " use --database instead, which bypasses RBAC"
        )
    return CommandError(f"the API server refused the request: {error.message}")
