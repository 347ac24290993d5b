"""``pgsched next``: upcoming occurrences of a ScheduledJob, or of an expression.

``pgsched next SJ`` reads the stored definition and asks
``engine.definitions.schedule_of(definition)`` for its occurrences from the stored
``next_run_at`` on — the schedule and the starting point the materializer itself uses,
as ``status.nextRuns`` does — so what it prints is what the engine will run.

``pgsched next --cron '30 8 * * MON-FRI' --tz Europe/Sofia`` (or ``--rrule``, ``--run-at``)
checks an expression before it is applied: it goes through ``spec.parse`` — the
validation the operator runs on every ScheduledJob — and ``definitions.build_schedule``,
so an expression it accepts is one the operator accepts, with the same occurrences. Give the
ScheduledJob's name too (``pgsched next SJ --cron 'H H * * *'``) and ``H`` fields hash
exactly as they will for that job; no database is needed for an expression.

Occurrences are printed in local time (the schedule's zone) and UTC. A DST-gap occurrence
under ``dstPolicy.gap: skip`` is not listed: it never runs (the engine records it as
``SKIPPED/DSTGap``); nor is one on a day a Calendar of the job's ``spec.calendars``
excludes (``SKIPPED/CalendarExcluded``): the calendars are read from the database, as the
tick and ``status.nextRuns`` read them.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from pgsched import spec as spec_module
from pgsched.cli import common, output, target
from pgsched.db import clock
from pgsched.engine import calendars, definitions
from pgsched.schedule import ScheduleError, Stream, zones
from pgsched.schedule import window as windows
from pgsched.schedule.calendars import NO_CALENDARS, Calendars
from pgsched.ui import words

MAX_COUNT = 1000
# Occurrences are listed strictly after ``after`` (what --after says, and what croniter's and
# dateutil's ``after`` mean); the stored next run itself is listed from just before it.
_JUST_BEFORE = timedelta(microseconds=1)
_FLAG_OF_FIELD = {
    "spec.schedule": "--cron",
    "spec.rrule": "--rrule",
    "spec.runAt": "--run-at",
    "spec.timeZone": "--tz",
    "spec.dstPolicy.gap": "--dst-gap",
    "spec.dstPolicy.repeat": "--dst-repeat",
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the next occurrences in local time and UTC, computed by the"
        " engine's own schedule code. With --cron, --rrule or --run-at, check an expression"
        " before applying it (no database needed). Note: -n is the count here; the"
        " namespace is --namespace."
    )
    parser.add_argument("name", metavar="SJ", nargs="?", help="ScheduledJob name")
    parser.add_argument(
        "-n",
        "--count",
        type=_count,
        default=10,
        help=f"how many occurrences (default 10, at most {MAX_COUNT})",
    )
    target.add_namespace(parser, short=False)
    target.add_kube_flags(parser)
    common.add_dsn(parser)
    output.add_flag(parser)
    expression = parser.add_mutually_exclusive_group()
    expression.add_argument("--cron", help="a cron expression, e.g. '30 8 * * MON-FRI'")
    expression.add_argument("--rrule", help="an RFC 5545 rule, e.g. 'FREQ=DAILY;BYHOUR=8'")
    expression.add_argument("--run-at", help="a one-shot time, e.g. 2026-12-24T18:00")
    parser.add_argument("--tz", default="UTC", help="time zone of the expression (default UTC)")
    parser.add_argument("--dst-gap", choices=["shift", "skip"], help="dstPolicy.gap")
    parser.add_argument("--dst-repeat", choices=["first", "last", "both"], help="dstPolicy.repeat")
    parser.add_argument(
        "--after",
        help="list occurrences strictly after this time (ISO 8601; local to the schedule's"
        " zone without an offset), e.g. 2027-03-27; by default from the stored job's next"
        " run, or from now for an expression",
    )
    parser.set_defaults(handler=run)


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"{text!r}: -n/--count is the number of occurrences, 1..{MAX_COUNT}"
            " (the namespace is --namespace for this command)"
        )
    return int(text)


def run(args: argparse.Namespace) -> int:
    expression = args.cron or args.rrule or args.run_at
    if expression is None and args.name is None:
        raise common.CommandError(
            "name a ScheduledJob, or give an expression to check"
            " (examples: pgsched next nightly-report;"
            " pgsched next --cron '30 8 * * MON-FRI' --tz Europe/Sofia)",
            code=2,
        )
    try:
        excluding = NO_CALENDARS
        if expression is None:
            described, schedule, after, notes, excluding = _stored(args)
        else:
            described, schedule, after, notes = _expression(args)
        upcoming = schedule.upcoming(after, count=args.count, exclusions=excluding)
    except (ScheduleError, OverflowError) as error:
        # A stored schedule this release no longer accepts, or one whose expansion runs
        # out of budget, or an --after at the edge of the calendar: a usage error.
        raise common.CommandError(f"cannot list occurrences: {error}", code=2) from None
    if isinstance(schedule, windows.Windowed):
        outside = schedule.window.note(after, more=bool(upcoming))
        notes += [outside] if outside else []
    zone = zones.load_zone(described["timeZone"])
    if args.output == "json":
        output.emit_json(
            {
                **described,
                "after": after,
                "notes": notes,
                "occurrences": [
                    {"at": item.at, "local": item.at.astimezone(zone).isoformat()}
                    for item in upcoming
                ],
            }
        )
        return 0
    print(f"{described['subject']}: {_heading(described, zone.key)}")
    for note in notes:
        print(f"note: {note}")
    if not upcoming:
        print(f"no occurrence after {output.utc_iso(after)}")
        return 0
    output.table(
        ["#", "local time", "utc"],
        [
            [index, output.local_time(item.at, zone), output.utc_iso(item.at)]
            for index, item in enumerate(upcoming, 1)
        ],
    )
    return 0


def _heading(described: dict[str, Any], zone: str) -> str:
    """The schedule as its expression, or in words for several (``spec.schedules`` is
    stored as JSON, which is no way to show it)."""
    if described["kind"] == "union":
        return f"schedules {words.describe('union', described['schedule'], zone)}"
    return f"{described['kind']} {described['schedule']!r} in {zone}"


def _stored(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], Stream, datetime, list[str], Calendars]:
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        now = clock.now(conn)
        excluding = calendars.load(conn, definition)
    zone = zones.load_zone(definition.time_zone)
    notes = []
    if args.after:
        after = common.parse_time(args.after, zone, flag="--after")
    elif definition.next_run_at is not None:
        # What the engine materializes next, like status.nextRuns, is listed first: nothing
        # before it runs (after a schedule change it is past the last materialized one).
        after = definition.next_run_at - _JUST_BEFORE
        if definition.next_run_at < now:
            notes.append(
                f"overdue since {output.utc_iso(definition.next_run_at)} (is an operator"
                " leading ticks?);"
                f" missed occurrences follow catchUp: {definition.catch_up}"
            )
    else:
        after = now
    if definition.is_suspended:
        why = definition.suspended_why
        notes.append(
            f"suspended ({why}): these occurrences are recorded as SKIPPED/Suspended until"
            " it is resumed"
        )
    if definition.schedule_kind == "none":
        notes.append("no schedule of its own: it runs only after its upstreams (spec.after)")
    if excluding.found:
        names = ", ".join(item.name for item in excluding.found)
        notes.append(f"occurrences on days Calendar {names} excludes are left out")
    if excluding.missing:
        notes.append(
            f"Calendar {', '.join(excluding.missing)} (spec.calendars.exclude) does not exist:"
            " occurrences are not checked against it"
        )
    described = {
        "subject": definition.key,
        "scheduledJob": definition.key,
        "kind": definition.schedule_kind,
        "schedule": definition.schedule,
        "timeZone": definition.time_zone,
        "suspended": definition.is_suspended,
    }
    return described, definitions.schedule_of(definition), after, notes, excluding


def _expression(args: argparse.Namespace) -> tuple[dict[str, Any], Stream, datetime, list[str]]:
    raw: dict[str, Any] = {"timeZone": args.tz}
    if args.cron:
        raw["schedule"] = args.cron
    elif args.rrule:
        raw["rrule"] = args.rrule
    else:
        raw["runAt"] = args.run_at
    dst = {
        key: value for key, value in (("gap", args.dst_gap), ("repeat", args.dst_repeat)) if value
    }
    if dst:
        raw["dstPolicy"] = dst
    notes = []
    seed = ""
    if args.name:
        seed = f"{target.namespace(args)}/{args.name}"
    elif args.cron and any(field.upper().startswith("H") for field in args.cron.split()):
        notes.append(
            "H fields hash the ScheduledJob's namespace/name: name the job"
            " (pgsched next SJ --cron ...) to see its exact times"
        )
    now = clock.local()  # no database here: this machine's clock
    try:
        zone = zones.load_zone(args.tz)
    except ScheduleError as error:
        raise common.CommandError(f"--tz: {error}", code=2) from None
    after = common.parse_time(args.after, zone, flag="--after") if args.after else now
    try:
        parsed = spec_module.parse(raw, hash_seed=seed, anchor=now, now=now)
        schedule = definitions.build_schedule(parsed, hash_seed=seed, anchor=now)
    except spec_module.SpecError as error:
        message = str(error)
        for field, flag in _FLAG_OF_FIELD.items():
            message = message.replace(f"{field}:", f"{flag}:")
        raise common.CommandError(message, code=2) from None
    described = {
        "subject": seed or "expression",
        "scheduledJob": seed or None,
        "kind": parsed.schedule_kind,
        "schedule": parsed.schedule,
        "timeZone": parsed.time_zone,
        "suspended": False,
    }
    return described, schedule, after, notes
