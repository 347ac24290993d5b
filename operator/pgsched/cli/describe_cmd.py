"""``pgsched describe <run-id>``: everything about one run, and its retry chain.

The retry chain shows every attempt of the same occurrence, first to last, so a failure
that was retried three times reads as one story: reasons, errors and Job names of each
attempt. The chain of ``spec.after`` shows both ways: the upstream run that queued this
one, and the downstream runs this one's final outcome queued.

Read from the database when one is given (a run id is global there), else through the Run
API as the kubeconfig's user, in the namespace of ``-n`` (RBAC ``get runs``): a tenant
needs no DSN, and both ways print the same (``engine.run_description``).
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from pgsched.cli import common, output, runs_remote, target
from pgsched.db import clock
from pgsched.engine import run_description, run_json
from pgsched.schedule import zones


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show one run: its ScheduledJob, status, reason and error, times,"
        " Kubernetes Job, cancellation, who requested it, and every attempt of the same"
        " occurrence. From the database with --dsn, else through the Run API with the"
        " kubeconfig (RBAC: get runs in the namespace)."
    )
    parser.add_argument("run_id", metavar="RUN-ID", type=run_id, help="a run id (see `runs`)")
    target.add_namespace(parser)
    target.add_kube_flags(parser)
    common.add_dsn(parser)
    output.add_flag(parser)
    parser.set_defaults(handler=run)


def run_id(text: str) -> int:
    """argparse type for run ids, with an example (run ids are positive integers)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id: run ids are positive integers, e.g. 4711"
            " (list them with `pgsched runs SJ`)"
        )
    return int(text)


def run(args: argparse.Namespace) -> int:
    document, lines = _read(args)
    if args.output == "json":
        output.emit_json(document)
        return 0
    zone = zones.load_zone(document["scheduledJob"]["timeZone"])

    def shown(value: run_description.Plain) -> object:
        if isinstance(value, datetime):
            return f"{output.local_time(value, zone)}  ({output.utc_iso(value)})"
        if isinstance(value, timedelta):
            return output.duration(value)
        return value

    output.fields([(label, shown(value)) for label, value in lines])
    attempts = document["retryChain"]
    if len(attempts) > 1:
        print("\nRetry chain:")
        output.table(
            ["attempt", "run", "status", "reason", "scheduled", "finished", "job"],
            [
                [
                    item["attempt"],
                    f"{item['id']}{' *' if item['id'] == args.run_id else ''}",
                    item["status"],
                    item["reason"],
                    output.local_time(_moment(item["scheduledFor"]), zone),
                    output.local_time(_moment(item["finishedAt"]), zone),
                    item["jobName"],
                ]
                for item in attempts
            ],
        )
    return 0


def _read(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], list[tuple[str, run_description.Plain]]]:
    """The describe document and lines: from the database when one is given, else through
    the Run API as the kubeconfig's user, else an error saying both ways."""
    if runs_remote.through_api(args, to="and -n NAMESPACE to read the run through the Run API"):
        document = runs_remote.description(target.kube(args), target.namespace(args), args.run_id)
        return document, run_description.lines_from_json(document.pop("lines"))
    with common.connect(args, application_name="pgsched-cli") as conn:
        found = run_description.of_run(conn, args.run_id, now=clock.now(conn))
    if found is None:
        raise common.CommandError(f"no run with id {args.run_id}")
    return run_description.as_json(found), run_description.lines(found)


def _moment(value: datetime | str | None) -> datetime | None:
    """An instant of a retry chain's run: a datetime read from the database, RFC 3339 text
    through the Run API."""
    return run_json.from_utc_iso(value) if isinstance(value, str) else value
