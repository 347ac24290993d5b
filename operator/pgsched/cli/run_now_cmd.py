"""``pgsched run-now <sj>``: queue a manual run now, once per idempotency token.

By default through the Kubernetes API server: the ``pgsched.dev/run-now=<token>``
annotation on the ScheduledJob, with its requester (``cli/requests.py``), so RBAC and the
audit log apply; the operator queues the run and records who asked. With ``--database``
(administrators) it calls the engine's ``runs.run_now`` directly with the schema owner's
DSN: the run row exists when the command returns.

Either way the run is claimed by the operator's next tick through the same dispatch path
as every scheduled run (caps, leases), and one run is queued per distinct token: a
repeated token queues nothing. Tokens are kept apart by source (``cli:<token>`` with
``--database``, ``annotation:<token>`` through the API server), so a token of one never
collides with one of the other.
"""

from __future__ import annotations

import argparse
import uuid

from pgsched.cli import common, output, requests, runs_api_requests, target
from pgsched.engine import run_json, runs

TOKEN_PREFIX = "cli:"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Queue one manual run of a ScheduledJob. With --token, repeating the"
        " command (a retried deploy step, say) queues nothing new. Without it a fresh token"
        " is generated. Goes through the Kubernetes API server (RBAC: patch scheduledjobs;"
        " with --via runs-api: create runs) unless --database is given."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
    requests.add_flags(parser)
    output.add_flag(parser)
    requests.add_parameter_flag(parser)
    runs_api_requests.add_via_flag(parser, verb="create")
    parser.add_argument(
        "--token",
        type=_token,
        help="idempotency token, e.g. deploy-1234 (default: a new random token); with"
        " --via runs-api, the Run's name",
    )
    parser.set_defaults(handler=run)


def _token(text: str) -> str:
    if not text.strip() or len(text) > 200 or not text.isprintable():
        raise argparse.ArgumentTypeError(
            "a token must be 1 to 200 characters, e.g. --token deploy-1234"
        )
    return text


def run(args: argparse.Namespace) -> int:
    token = args.token or uuid.uuid4().hex
    values = requests.parameter_values(args)
    if runs_api_requests.chosen(args):
        return _through_runs_api(args, values)
    if args.database:
        return _through_database(args, token, values)
    from pgsched.k8s import names

    kube = target.kube(args)
    obj = requests.scheduled_job(kube, target.namespace(args), args.name)
    sent = requests.send(kube, args, obj, names.ANNOTATION_RUN_NOW, token, parameters=values)
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": sent.scheduled_job,
                "token": token,
                "requestedBy": sent.requested_by,
                "parameters": values,
                "via": "kubernetes",
                "taken": sent.taken,
                "waitingForStandby": sent.waiting,
            }
        )
    else:
        print(requests.describe(sent, f"run-now (token {token})", timeout=args.timeout))
    return 0


def _through_runs_api(args: argparse.Namespace, values: dict[str, str]) -> int:
    namespace = target.namespace(args)
    created = runs_api_requests.create(
        target.kube(args), namespace, args.name, token=args.token, parameters=values
    )
    if args.output == "json":
        status = created.run.get("status") or {}
        output.emit_json(
            {
                "scheduledJob": f"{namespace}/{args.name}",
                "run": created.name,
                "id": status.get("id"),
                "status": status.get("phase"),
                "created": created.created,
                "requestedBy": status.get("requestedBy"),
                "parameters": values,
                "via": "runs-api",
            }
        )
    else:
        print(runs_api_requests.describe_created(created, namespace))
    return 0


def _through_database(args: argparse.Namespace, token: str, values: dict[str, str]) -> int:
    requests.announce_bypass()
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        requests.check_parameters(definition.spec, values, definition.key)
        try:
            enqueued = runs.run_now(
                conn,
                definition.id,
                token=TOKEN_PREFIX + token,
                requested_by=requests.database_requester(),
                parameters=values,
            )
        except runs.UnknownDefinition:
            raise common.CommandError(
                f"{definition.key} was deleted while the run was being queued"
            ) from None
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": definition.key,
                "token": token,
                "created": enqueued.created,
                "run": run_json.summary(enqueued.run),
                "via": "database",
            }
        )
        return 0
    item = enqueued.run
    if enqueued.created:
        print(f"run {item.id} of {definition.key} queued (token {token})")
    else:
        print(
            f"token {token} was used before: run {item.id} of {definition.key}"
            f" ({item.status}); nothing new queued"
        )
    return 0
