"""``pgsched cancel <run-id>`` / ``pgsched cancel <sj> --all``: stop runs cooperatively.

It calls the engine's ``runs.cancel_run`` / ``runs.cancel_definition``, the functions the
``pgsched.dev/cancel`` annotation uses, so both behave alike: a QUEUED run is CANCELLED at
once; a RUNNING run gets ``cancel_requested`` — its heartbeat sidecar tells the workload,
and if it has not stopped ``cancelGraceSeconds`` later the engine ends it CANCELLED and
its Job is deleted. The database notifies the pod's heartbeat at once (LISTEN/NOTIFY), and
going straight to the database means no wait for the operator to see an annotation and
works while the API server is down.

``--all`` is required to cancel by ScheduledJob name, so a typo'd run id can never cancel
every run of a job.
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
from typing import Any

from pgsched.cli import common, output, runs_cmd, target
from pgsched.engine import runs

WHY = "cancelled with `pgsched cancel`"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Cancel a run (queued: at once; running: cooperatively, within the"
        " ScheduledJob's cancelGraceSeconds). With --all, TARGET is a ScheduledJob and all"
        " its queued and running runs are cancelled."
    )
    parser.add_argument(
        "name", metavar="TARGET", help="a run id, or a ScheduledJob name with --all"
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="TARGET is a ScheduledJob: cancel all its queued and running runs",
    )
    target.add_namespace(parser)
    target.add_kube_flags(parser)
    common.add_dsn(parser)
    output.add_flag(parser)
    parser.set_defaults(handler=run)


def _by() -> str:
    """``CLI (user@host)``: who ran ``pgsched cancel``, as far as this machine knows."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container with an arbitrary uid)
        user = f"uid {os.getuid()}"
    return f"{runs.BY_CLI} ({user}@{socket.gethostname()})"


def run(args: argparse.Namespace) -> int:
    if not args.all and not args.name.isdigit():
        raise common.CommandError(
            f"{args.name!r} is not a run id; to cancel every queued and running run of the"
            f" ScheduledJob {args.name}, add --all (example: pgsched cancel {args.name} --all)",
            code=2,
        )
    with common.connect(args, application_name="pgsched-cli") as conn:
        if args.all:
            definition = target.definition(conn, args)
            subject = definition.key
            outcome = runs.cancel_definition(conn, definition.id, by=_by(), why=WHY)
        else:
            found = runs.get(conn, int(args.name))
            if found is None:
                raise common.CommandError(f"no run with id {args.name}")
            subject = f"run {found.id}"
            outcome = runs.cancel_run(conn, found.id, by=_by(), why=WHY)
            if not outcome.cancelled and not outcome.asked_to_stop:
                # Nothing changed: say why (it ended, or was asked to stop before).
                current = runs.get(conn, found.id) or found
                return _report_unchanged(args, current)
    if args.output == "json":
        output.emit_json(
            {
                "target": subject,
                "cancelled": [runs_cmd.summary(item) for item in outcome.cancelled],
                "askedToStop": [runs_cmd.summary(item) for item in outcome.asked_to_stop],
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
                "run": runs_cmd.summary(current),
            }
        )
    elif current.status == "RUNNING":
        print(f"run {current.id}: cancellation was already requested; it is stopping")
    else:
        print(f"run {current.id}: already {current.status}; nothing to cancel")
    return 0
