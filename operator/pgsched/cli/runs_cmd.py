"""``pgsched runs <sj>``: the run history of a ScheduledJob, newest first.

Every attempt is a row (retries, skipped occurrences, cancelled runs), so this is the
answer to "did it run at 09:00, and if not, why?". The ``chain`` column shows the chain
both ways: ``← 41`` on a run queued by upstream run 41 (``spec.after``), ``→ load 50`` on
a run whose final outcome queued run 50 of ScheduledJob ``load``. Times are shown in the ScheduledJob's
time zone, which is how its schedule is written; ``-o json`` gives UTC instants.
"""

from __future__ import annotations

import argparse

from pgsched.cli import common, output, runs_remote, target
from pgsched.db import queries
from pgsched.engine import chain, definitions, run_json
from pgsched.engine.models import Run
from pgsched.schedule import zones

_STATUSES = ("QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "SKIPPED")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the runs of a ScheduledJob, newest first: every attempt, retry,"
        " skipped occurrence and cancellation, with its reason. Times are in the"
        " ScheduledJob's time zone (-o json: UTC)."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
    output.add_flag(parser)
    parser.add_argument(
        "--limit",
        type=common.positive_int,
        default=20,
        help="show at most this many runs (default 20)",
    )
    parser.add_argument(
        "--status",
        action="append",
        type=_status,
        help="only runs in this status (repeatable), e.g. --status FAILED",
    )
    parser.add_argument(
        "--include-deleted",
        action="store_true",
        help="also the runs of deleted ScheduledJobs of this name (a re-created ScheduledJob"
        " is a new one; the old one's runs keep their ids)",
    )
    parser.set_defaults(handler=run)


def _status(text: str) -> str:
    status = text.upper()
    if status not in _STATUSES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run status; use one of {', '.join(_STATUSES)}"
        )
    return status


def run(args: argparse.Namespace) -> int:
    found = _read(args)
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": found.key,
                "timeZone": found.time_zone,
                "scheduledJobs": [
                    {"uid": uid, "deletedAt": deleted_at}
                    for uid, deleted_at in found.scheduled_jobs
                ],
                "runs": [
                    {
                        **run_json.summary(
                            item, found.triggered.get(item.id, []), found.upstreams.get(item.id)
                        ),
                        "scheduledJobUid": item.definition_id,
                    }
                    for item in found.runs
                ],
            }
        )
        return 0
    if not found.runs:
        print(f"no runs of {found.key} yet")
        return 0
    zone = zones.load_zone(found.time_zone)
    deleted_at = dict(found.scheduled_jobs)
    headers = ["id", "status", "reason", "attempt", "trigger"]
    headers += ["scheduled", "started", "finished", "duration", "chain"]
    if args.include_deleted:
        headers.append("scheduledjob")
    table = []
    for item in found.runs:
        row: list[object] = [
            item.id,
            item.status,
            reason_of(item),
            item.attempt,
            item.trigger,
            output.local_time(item.scheduled_for, zone),
            output.local_time(item.started_at, zone),
            output.local_time(item.finished_at, zone),
            duration_of(item),
            chain_of(item, found.triggered.get(item.id, []), found.upstreams.get(item.id)),
        ]
        if args.include_deleted:
            gone = deleted_at.get(item.definition_id)
            row.append(f"deleted {output.local_time(gone, zone)}" if gone else "live")
        table.append(row)
    output.table(headers, table)
    return 0


def _read(args: argparse.Namespace) -> runs_remote.History:
    """From the database when one is given, else through the Run API as the kubeconfig's
    user (a tenant needs no DSN), else an error saying both ways."""
    if runs_remote.through_api(args, to="to read the runs through the Run API"):
        return runs_remote.history(
            target.kube(args),
            target.namespace(args),
            args.name,
            statuses=args.status,
            limit=args.limit,
            include_deleted=args.include_deleted,
        )
    with common.connect(args, application_name="pgsched-cli") as conn:
        if args.include_deleted:
            found = definitions.find_with_deleted(conn, target.namespace(args), args.name)
            if not found:
                target.definition(conn, args)  # raises, saying where it looked
        else:
            found = [target.definition(conn, args)]
        rows = conn.execute(
            queries.get("run_history"),
            {
                "definition_ids": [item.id for item in found],
                "statuses": args.status,
                "limit": args.limit,
            },
        ).fetchall()
        history = [Run.from_row(row) for row in rows]
        return runs_remote.History(
            key=found[0].key,
            time_zone=found[0].time_zone,
            scheduled_jobs=[(item.id, item.deleted_at) for item in found],
            runs=history,
            triggered=chain.triggered(conn, [item.id for item in history]),
            upstreams=chain.upstream_run_ids(
                conn, [item.id for item in history if item.trigger == "upstream"]
            ),
        )


def chain_of(
    item: Run, triggered: list[chain.Triggered], upstreams: list[int] | None = None
) -> str | None:
    """``← upstream runs`` (every one of a fan-in) and ``→ downstream runs``, for the table."""
    ups = run_json.upstream_ids(item, upstreams)
    parts = [f"← {', '.join(map(str, ups))}"] if ups else []
    parts += [f"→ {down.scheduled_job} {down.run_id}" for down in triggered]
    return ", ".join(parts) or None


def reason_of(item: Run) -> str | None:
    """The reason, and for a cancellation who asked (its first word: Replace, CLI, ...)."""
    if item.cancelled_by and (item.status == "CANCELLED" or item.cancel_requested):
        who = item.cancelled_by.split(" ", 1)[0]
        return f"{item.reason or 'Stopping'} by {who}"
    return item.reason


def duration_of(item: Run) -> str:
    if item.started_at is None:
        return output.NOTHING
    if item.finished_at is None:
        return "running" if item.status == "RUNNING" else output.NOTHING
    return output.duration(item.finished_at - item.started_at)
