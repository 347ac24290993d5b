"""``pgsched backfill <sj> --from --to``: run the occurrences of a past range again.

Occurrences of the ScheduledJob's schedule between ``--from`` and ``--to`` (both
inclusive) each become one QUEUED run with trigger ``backfill``, oldest first, queued once
however often the command runs (``engine/backfill.py`` says how).

By default the request goes through the Kubernetes API server as the
``pgsched.dev/backfill=<from>/<to>`` annotation with its requester (``cli/requests.py``),
so RBAC and the audit log apply. With ``--database`` (administrators) the CLI queues the
runs itself and can stay attached: ``--parallelism N`` keeps at most N of them queued or
running, so a long backfill cannot crowd out the job's scheduled runs, and ``--wait``
follows it to its end. Backfill runs are dispatched like any other, under
``maxConcurrentRuns``.

In full: docs/cli.md, "backfill".
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgsched import wording
from pgsched.cli import common, output, requests, target
from pgsched.db import clock, queries
from pgsched.engine import backfill, definitions
from pgsched.schedule import timeline, zones

if TYPE_CHECKING:
    from pgsched.db.connection import Connection
    from pgsched.engine.models import Definition

POLL_SECONDS = 1.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Queue one run (trigger backfill) per occurrence of the ScheduledJob's"
        " schedule between --from and --to, both inclusive, oldest first. Running the same"
        " backfill again queues nothing twice. Goes through the Kubernetes API server (RBAC:"
        " patch scheduledjobs) unless --database is given."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
    requests.add_flags(parser)
    requests.add_parameter_flag(parser)
    output.add_flag(parser)
    parser.add_argument(
        "--from",
        dest="start",
        required=True,
        help="first instant (ISO 8601; local to the job's zone without an offset), e.g. 2026-06-01",
    )
    parser.add_argument(
        "--to",
        dest="end",
        required=True,
        help="last instant, inclusive; a bare date includes the whole day, e.g. 2026-06-07",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the occurrences; queue nothing"
    )
    parser.add_argument(
        "--parallelism",
        type=common.positive_int,
        help="keep at most N occurrences queued or running (stays attached; implies --wait;"
        " needs --database)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="follow the runs until every occurrence finished (needs --database)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    values = requests.parameter_values(args)
    if args.database:
        return _through_database(args, values)
    if args.parallelism is not None or args.wait:
        raise common.CommandError(
            "--parallelism and --wait follow the runs in the database: they need --database"
            " (administrators); without them the operator queues the whole range at once",
            code=2,
        )
    from pgsched.k8s import names
    from pgsched.k8s.scheduledjobs import commands

    kube = target.kube(args)
    obj = requests.scheduled_job(kube, target.namespace(args), args.name)
    meta, spec = obj["metadata"], obj.get("spec") or {}
    zone = zones.load_zone(str(spec.get("timeZone") or "UTC"))
    key = f"{meta['namespace']}/{meta['name']}"
    # This machine's clock, for a first check: the operator checks again with the database's.
    now = clock.local()
    start, end, wanted = occurrences(_schedule_of(obj, now=now), zone, args, now=now, subject=key)
    if args.dry_run:
        return _dry_run(args, key, zone, wanted)
    value = commands.backfill_value(start.astimezone(UTC), end.astimezone(UTC))
    sent = requests.send(kube, args, obj, names.ANNOTATION_BACKFILL, value, parameters=values)
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": key,
                "occurrences": len(wanted),
                "range": value,
                "parameters": values,
                "requestedBy": sent.requested_by,
                "via": "kubernetes",
                "taken": sent.taken,
                "waitingForStandby": sent.waiting,
            }
        )
    else:
        what = f"backfill of {wording.plural(len(wanted), 'occurrence')} ({value})"
        print(requests.describe(sent, what, timeout=args.timeout))
    return 0


def _schedule_of(obj: dict[str, Any], *, now: datetime) -> timeline.Stream:
    """The ScheduledJob's schedule from its spec, as the operator builds it."""
    from pgsched import spec as spec_module
    from pgsched.k8s import names

    meta = obj["metadata"]
    anchor = names.timestamp(meta["creationTimestamp"])
    try:
        parsed = spec_module.parse(
            obj.get("spec") or {},
            hash_seed=f"{meta['namespace']}/{meta['name']}",
            anchor=anchor,
            now=now,
        )
    except spec_module.SpecError as error:
        raise common.CommandError(f"the ScheduledJob's spec is invalid: {error}") from None
    return definitions.build_schedule(
        parsed, hash_seed=f"{meta['namespace']}/{meta['name']}", anchor=anchor
    )


def _through_database(args: argparse.Namespace, values: dict[str, str]) -> int:
    requests.announce_bypass()
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        requests.check_parameters(definition.spec, values, definition.key)
        zone = zones.load_zone(definition.time_zone)
        _, _, wanted = occurrences(
            definitions.schedule_of(definition),
            zone,
            args,
            now=clock.now(conn),
            subject=definition.key,
        )
        if args.dry_run:
            return _dry_run(args, definition.key, zone, wanted)
        progress = output.Progress()
        if args.parallelism is None:
            queued, already = _queue(conn, definition, wanted, values, progress)
            if not args.wait:
                return _report_queued(args, definition, wanted, queued, already)
        elif args.parallelism > definition.max_concurrent_runs:
            progress.done(
                f"note: at most maxConcurrentRuns ({definition.max_concurrent_runs}) of"
                f" {definition.key} run at once, whatever --parallelism says"
            )
        try:
            finals = _follow(conn, definition, wanted, values, args.parallelism, progress)
        except KeyboardInterrupt:
            progress.done(
                "interrupted: runs already queued go on; run the same command again to"
                " continue the backfill (nothing is queued twice)"
            )
            raise
    counts = Counter(finals.values())
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": definition.key,
                "occurrences": len(wanted),
                "result": dict(counts),
            }
        )
    else:
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        print(
            f"backfill of {definition.key} finished:"
            f" {wording.plural(len(wanted), 'occurrence')}, {summary}"
        )
    return 0 if set(counts) <= {"COMPLETED"} else 1


def occurrences(
    schedule: timeline.Stream,
    zone: Any,
    args: argparse.Namespace,
    *,
    now: datetime,
    subject: str,
) -> tuple[datetime, datetime, list[datetime]]:
    """``--from`` and ``--to`` as instants, and the occurrences between them."""
    start = common.parse_time(args.start, zone, flag="--from")
    end = common.parse_time(args.end, zone, flag="--to", end_of_day=True)
    try:
        found = backfill.occurrences(
            schedule,
            start,
            end,
            now=now,
            first=f"--from {args.start}",
            last=f"--to {args.end}",
            subject=subject,
        )
    except backfill.RangeError as error:
        raise common.CommandError(str(error), code=2) from None
    return start, end, found


def _dry_run(args: argparse.Namespace, key: str, zone: Any, wanted: list[datetime]) -> int:
    if args.output == "json":
        output.emit_json({"scheduledJob": key, "dryRun": True, "occurrences": wanted})
        return 0
    print(f"dry run: {wording.plural(len(wanted), 'occurrence')} of {key} would be queued")
    if wanted:
        output.table(
            ["#", "local time", "utc"],
            [
                [index, output.local_time(at, zone), output.utc_iso(at)]
                for index, at in enumerate(wanted, 1)
            ],
        )
    return 0


def _queue(
    conn: Connection,
    definition: Definition,
    wanted: list[datetime],
    values: dict[str, str],
    progress: output.Progress,
) -> tuple[int, int]:
    def told(done: int) -> None:
        if len(wanted) > backfill.INSERT_BATCH:
            progress.update(f"queueing backfill of {definition.key}: {done}/{len(wanted)}")

    return backfill.queue(
        conn,
        definition,
        wanted,
        requested_by=requests.database_requester(),
        parameters=values,
        progress=told,
    )


def _report_queued(
    args: argparse.Namespace,
    definition: Definition,
    wanted: list[datetime],
    queued: int,
    already: int,
) -> int:
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": definition.key,
                "occurrences": len(wanted),
                "queued": queued,
                "alreadyQueued": already,
                "first": wanted[0] if wanted else None,
                "last": wanted[-1] if wanted else None,
            }
        )
        return 0
    print(
        f"backfill of {definition.key}: {wording.plural(len(wanted), 'occurrence')}, {queued} queued"
        + (f", {already} queued by an earlier backfill" if already else "")
    )
    if wanted:
        print(
            f"oldest first, from {output.utc_iso(wanted[0])} to {output.utc_iso(wanted[-1])};"
            f" at most maxConcurrentRuns ({definition.max_concurrent_runs}) run at once"
        )
    return 0


def _follow(
    conn: Connection,
    definition: Definition,
    wanted: list[datetime],
    values: dict[str, str],
    parallelism: int | None,
    progress: output.Progress,
) -> dict[datetime, str]:
    """Feed (with a parallelism) and watch until every occurrence has a final status."""
    while True:
        latest = conn.execute(
            queries.get("backfill_progress"),
            {"definition_id": definition.id, "scheduled_for": wanted},
        ).fetchall()
        states = {row["scheduled_for"]: row for row in latest}
        active = sum(1 for row in latest if not _final(row))
        if parallelism is not None and active < parallelism:
            missing = [at for at in wanted if at not in states][: parallelism - active]
            if missing:
                backfill.insert(
                    conn,
                    definition,
                    missing,
                    requested_by=requests.database_requester(),
                    parameters=values,
                )
                continue  # read the new rows before reporting
        finals = {at: row["status"] for at, row in states.items() if _final(row)}
        counts = Counter(row["status"] for row in latest if not _final(row))
        progress.update(
            f"backfill of {definition.key}: {len(finals)}/{len(wanted)} finished"
            f" ({_counted(Counter(finals.values()))}), {counts['RUNNING']} running,"
            f" {counts['QUEUED']} queued"
        )
        if len(finals) == len(wanted):
            progress.done(f"backfill of {definition.key}: {len(wanted)}/{len(wanted)} finished")
            return finals
        time.sleep(POLL_SECONDS)


def _final(row: dict[str, Any]) -> bool:
    if row["status"] in {"QUEUED", "RUNNING"}:
        return False
    # A failed attempt is final once settled (settle decided there is no retry).
    return row["status"] != "FAILED" or row["settled_at"] is not None


def _counted(counts: Counter[str]) -> str:
    return (
        ", ".join(f"{count} {status.lower()}" for status, count in sorted(counts.items()))
        or "none yet"
    )
