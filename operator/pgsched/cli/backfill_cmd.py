"""``pgsched backfill <sj> --from --to``: run the occurrences of a past range again.

Occurrences come from ``engine.definitions.schedule_of(definition)`` — the schedule the
materializer uses — between ``--from`` and ``--to`` (both inclusive; a bare date means the
whole day, local to the ScheduledJob's zone). Each becomes one QUEUED run with trigger
``backfill``, oldest first. The occurrence key is unique per (definition, scheduled_for,
trigger), so running the same backfill twice, or resuming an interrupted one, queues
nothing twice; a backfill run is distinct from the scheduled run of the same instant,
because re-running the past is the point. Backfill runs have no starting deadline and are
never skipped by ``concurrencyPolicy: Skip`` (that applies to scheduled runs).

Parallelism: backfill runs are dispatched like any other run, so ``maxConcurrentRuns``
always holds (shared with the job's scheduled and manual runs). Without
``--parallelism`` the whole range is queued at once and runs as fast as that cap allows.
With ``--parallelism N`` the command stays attached and keeps at most N occurrences of
this backfill queued or running, queueing the next as earlier ones finish (so a backfill
of a year cannot crowd out the job's scheduled runs for hours); interrupting it stops the
feeding, and the same command resumes it. ``--wait`` (implied by ``--parallelism``)
follows the backfill to its end and exits 1 if any occurrence did not complete.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgsched.cli import common, output, target
from pgsched.db import clock, queries
from pgsched.engine import definitions
from pgsched.schedule import zones

if TYPE_CHECKING:
    from pgsched.db.connection import Connection
    from pgsched.engine.models import Definition

MAX_OCCURRENCES = 100_000
INSERT_BATCH = 1_000
POLL_SECONDS = 1.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Queue one run (trigger backfill) per occurrence of the ScheduledJob's"
        " schedule between --from and --to, both inclusive, oldest first. Running the same"
        " backfill again queues nothing twice."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
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
        help="keep at most N occurrences queued or running (stays attached; implies --wait)",
    )
    parser.add_argument(
        "--wait", action="store_true", help="follow the runs until every occurrence finished"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        now = clock.now(conn)
        wanted = occurrences(definition, args, now=now)
        if args.dry_run:
            return _dry_run(args, definition, wanted)
        progress = output.Progress()
        if args.parallelism is None:
            queued, already = _queue(conn, definition, wanted, progress)
            if not args.wait:
                return _report_queued(args, definition, wanted, queued, already)
        elif args.parallelism > definition.max_concurrent_runs:
            progress.done(
                f"note: at most maxConcurrentRuns ({definition.max_concurrent_runs}) of"
                f" {definition.key} run at once, whatever --parallelism says"
            )
        try:
            finals = _follow(conn, definition, wanted, args.parallelism, progress)
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
        print(f"backfill of {definition.key} finished: {len(wanted)} occurrences, {summary}")
    return 0 if set(counts) <= {"COMPLETED"} else 1


def occurrences(
    definition: Definition, args: argparse.Namespace, *, now: datetime
) -> list[datetime]:
    zone = zones.load_zone(definition.time_zone)
    start = common.parse_time(args.start, zone, flag="--from")
    end = common.parse_time(args.end, zone, flag="--to", end_of_day=True)
    if start > end:
        raise common.CommandError(
            f"--from {args.start} is after --to {args.end}: nothing to backfill", code=2
        )
    if end > now:
        raise common.CommandError(
            f"--to {args.end} ({output.utc_iso(end)}) is in the future (now is"
            f" {output.utc_iso(now)}): backfill re-runs past occurrences only, the schedule"
            " runs future ones",
            code=2,
        )
    found: list[datetime] = []
    schedule = definitions.schedule_of(definition)
    for occurrence in schedule.occurrences_after(start - timedelta(microseconds=1)):
        if occurrence.at > end:
            break
        if occurrence.skipped:  # a DST gap under gap: skip never runs
            continue
        found.append(occurrence.at)
        if len(found) > MAX_OCCURRENCES:
            raise common.CommandError(
                f"the range holds more than {MAX_OCCURRENCES} occurrences of"
                f" {definition.key}; split it into smaller ranges",
                code=2,
            )
    return found


def _dry_run(args: argparse.Namespace, definition: Definition, wanted: list[datetime]) -> int:
    if args.output == "json":
        output.emit_json({"scheduledJob": definition.key, "dryRun": True, "occurrences": wanted})
        return 0
    zone = zones.load_zone(definition.time_zone)
    print(f"dry run: {len(wanted)} occurrences of {definition.key} would be queued")
    if wanted:
        output.table(
            ["#", "local time", "utc"],
            [
                [index, output.local_time(at, zone), output.utc_iso(at)]
                for index, at in enumerate(wanted, 1)
            ],
        )
    return 0


def _insert(conn: Connection, definition: Definition, batch: list[datetime]) -> int:
    rows = conn.execute(
        queries.get("insert_backfill"),
        {"definition_id": definition.id, "scheduled_for": batch},
    ).fetchall()
    return len(rows)


def _queue(
    conn: Connection, definition: Definition, wanted: list[datetime], progress: output.Progress
) -> tuple[int, int]:
    queued = 0
    for first in range(0, len(wanted), INSERT_BATCH):
        queued += _insert(conn, definition, wanted[first : first + INSERT_BATCH])
        done = min(first + INSERT_BATCH, len(wanted))
        if len(wanted) > INSERT_BATCH:
            progress.update(f"queueing backfill of {definition.key}: {done}/{len(wanted)}")
    return queued, len(wanted) - queued


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
        f"backfill of {definition.key}: {len(wanted)} occurrences, {queued} queued"
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
                _insert(conn, definition, missing)
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
