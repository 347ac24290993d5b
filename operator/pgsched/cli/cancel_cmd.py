"""``pgsched cancel <sj> <run-id>`` / ``pgsched cancel <sj> --all``: stop runs cooperatively.

By default through the Kubernetes API server: the ``pgsched.dev/cancel=<run-id|all>``
annotation on the ScheduledJob, with its requester (``cli/requests.py``), so RBAC and the
audit log apply; the operator carries it out with the engine's ``runs.cancel_run`` /
``runs.cancel_definition`` and records who asked (``cancelledBy``: ``Annotation (alice)``).
With ``--database`` (administrators) the CLI calls those functions itself with the schema
owner's DSN — then a bare run id is enough (``pgsched cancel 4711 --database``), and the
run's cancellation records ``CLI (user@host)``.

Either way a QUEUED run is CANCELLED at once; a RUNNING run gets ``cancel_requested`` —
its heartbeat sidecar tells the workload (the database notifies it at once), and if it has
not stopped ``cancelGraceSeconds`` later the engine ends it CANCELLED and its Job is
deleted.

``--all`` is required to cancel by ScheduledJob name alone, so a forgotten run id can
never cancel every run of a job.
"""

from __future__ import annotations

import argparse
from typing import Any

from pgsched.cli import common, output, requests, runs_api_requests, target
from pgsched.engine import run_json, runs

WHY = "cancelled with `pgsched cancel`"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Cancel a run (queued: at once; running: cooperatively, within the"
        " ScheduledJob's cancelGraceSeconds): pgsched cancel SJ RUN-ID. With --all, every"
        " queued and running run of SJ. Goes through the Kubernetes API server (RBAC: patch"
        " scheduledjobs; with --via runs-api: delete runs) unless --database is given; with"
        " --database a run id alone will do."
    )
    parser.add_argument(
        "name", metavar="TARGET", help="a ScheduledJob (or, with --database, a run id)"
    )
    parser.add_argument("run_id", metavar="RUN-ID", nargs="?", help="the run to cancel")
    parser.add_argument(
        "--all",
        action="store_true",
        help="cancel all queued and running runs of the ScheduledJob TARGET",
    )
    target.add_namespace(parser)
    target.add_kube_flags(parser)
    common.add_dsn(parser)
    requests.add_flags(parser)
    runs_api_requests.add_via_flag(parser, verb="delete")
    output.add_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    run_id = _run_id(args)
    if runs_api_requests.chosen(args):
        return _through_runs_api(args, run_id)
    if args.database:
        return _through_database(args, run_id)
    if run_id is not None and args.run_id is None:
        raise common.CommandError(
            f"{args.name!r} is a run id: name its ScheduledJob too, so the request goes"
            f" through Kubernetes RBAC (example: pgsched cancel report {args.name});"
            " administrators may pass --database instead",
            code=2,
        )
    from pgsched.k8s import names

    kube = target.kube(args)
    obj = requests.scheduled_job(kube, target.namespace(args), args.name)
    value = "all" if args.all else str(run_id)
    sent = requests.send(kube, args, obj, names.ANNOTATION_CANCEL, value)
    if args.output == "json":
        output.emit_json(
            {
                "target": f"run {run_id}" if run_id is not None else sent.scheduled_job,
                "requestedBy": sent.requested_by,
                "via": "kubernetes",
                "taken": sent.taken,
                "waitingForStandby": sent.waiting,
            }
        )
    else:
        what = f"cancel of run {run_id}" if run_id is not None else "cancel of every run"
        print(requests.describe(sent, what, timeout=args.timeout))
    return 0


def _through_runs_api(args: argparse.Namespace, run_id: int | None) -> int:
    if run_id is None:
        # One run per delete: every run of a job at once is the annotation's, which the
        # operator carries out in one transaction (a run queued meanwhile is not missed).
        raise common.CommandError(
            f"--all goes through the annotation: pgsched cancel {args.name} --all"
            " (without --via runs-api)",
            code=2,
        )
    cancelled = runs_api_requests.cancel(
        target.kube(args), target.namespace(args), args.name, run_id
    )
    if args.output == "json":
        output.emit_json(
            {
                "target": f"run {run_id}",
                "before": cancelled.before["status"].get("phase"),
                "status": cancelled.after["status"].get("phase"),
                "cancelRequested": bool(cancelled.after["status"].get("cancelRequested")),
                "message": cancelled.message,
                "via": "runs-api",
            }
        )
    else:
        print(runs_api_requests.describe_cancelled(cancelled))
    return 0


def _run_id(args: argparse.Namespace) -> int | None:
    """The run named on the command line (None with --all), or a usage error."""
    text = args.run_id if args.run_id is not None else args.name
    if args.all:
        if args.run_id is not None:
            raise common.CommandError(
                "give a run id or --all, not both (example: pgsched cancel report --all)",
                code=2,
            )
        return None
    if not text.isdigit() or len(text) > 18:
        raise common.CommandError(
            f"{text!r} is not a run id; to cancel every queued and running run of the"
            f" ScheduledJob {args.name}, add --all (example: pgsched cancel {args.name} --all)",
            code=2,
        )
    return int(text)


def _through_database(args: argparse.Namespace, run_id: int | None) -> int:
    requests.announce_bypass()
    by = requests.database_requester()
    with common.connect(args, application_name="pgsched-cli") as conn:
        if run_id is None:
            definition = target.definition(conn, args)
            subject = definition.key
            outcome = runs.cancel_definition(conn, definition.id, by=by, why=WHY)
        else:
            found = runs.get(conn, run_id)
            if found is None:
                raise common.CommandError(f"no run with id {run_id}")
            if args.run_id is not None and found.definition_id != target.definition(conn, args).id:
                raise common.CommandError(f"run {run_id} is not a run of {args.name}")
            subject = f"run {found.id}"
            outcome = runs.cancel_run(conn, found.id, by=by, why=WHY)
            if not outcome.cancelled and not outcome.asked_to_stop:
                # Nothing changed: say why (it ended, or was asked to stop before).
                current = runs.get(conn, found.id) or found
                return _report_unchanged(args, current)
    if args.output == "json":
        output.emit_json(
            {
                "target": subject,
                "cancelled": [run_json.summary(item) for item in outcome.cancelled],
                "askedToStop": [run_json.summary(item) for item in outcome.asked_to_stop],
                "via": "database",
            }
        )
        return 0
    for item in outcome.cancelled:
        print(f"run {item.id}: was queued, now CANCELLED")
    for item in outcome.asked_to_stop:
        print(f"run {item.id}: running, asked to stop (it ends CANCELLED when it has)")
    if not outcome.cancelled and not outcome.asked_to_stop:
        print(f"{subject}: no queued or running runs to cancel")
    return 0


def _report_unchanged(args: argparse.Namespace, current: Any) -> int:
    if args.output == "json":
        output.emit_json(
            {
                "target": f"run {current.id}",
                "cancelled": [],
                "askedToStop": [],
                "run": run_json.summary(current),
                "via": "database",
            }
        )
    elif current.status == "RUNNING":
        print(f"run {current.id}: cancellation was already requested; it is stopping")
    else:
        print(f"run {current.id}: already {current.status}; nothing to cancel")
    return 0
