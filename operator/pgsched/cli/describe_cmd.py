"""``pgsched describe <run-id>``: everything about one run, and its retry chain.

A run id is global (it is the row's key), so no namespace is needed. The retry chain
shows every attempt of the same occurrence, first to last, so a failure that was retried
three times reads as one story: reasons, errors and Job names of each attempt. The chain
of ``spec.after`` shows both ways: the upstream run that queued this one, and the
downstream runs this one's final outcome queued.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from pgsched.cli import common, output
from pgsched.db import clock
from pgsched.engine import definitions, run_facts, run_json, runs
from pgsched.engine.models import Start
from pgsched.schedule import zones


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show one run: its ScheduledJob, status, reason and error, times,"
        " Kubernetes Job, cancellation, who requested it, and every attempt of the same"
        " occurrence."
    )
    parser.add_argument("run_id", metavar="RUN-ID", type=run_id, help="a run id (see `runs`)")
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
    with common.connect(args, application_name="pgsched-cli") as conn:
        found = runs.get(conn, args.run_id)
        if found is None:
            raise common.CommandError(f"no run with id {args.run_id}")
        definition = definitions.get(conn, found.definition_id)
        assert definition is not None  # job_runs.definition_id is a foreign key
        zone = zones.load_zone(definition.time_zone)
        facts = run_facts.of_run(conn, found, definition, now=clock.now(conn), zone=zone)
        upstream = runs.get(conn, found.upstream_run_id) if found.upstream_run_id else None
    if args.output == "json":
        output.emit_json(
            {
                "run": run_json.summary(
                    facts.run, facts.triggered, [item.run_id for item in facts.upstreams]
                ),
                "requestedBy": facts.requested_by,
                "scheduledJob": {
                    "namespace": definition.namespace,
                    "name": definition.name,
                    "uid": definition.id,
                    "timeZone": definition.time_zone,
                    "deleted": definition.deleted_at is not None,
                },
                "retryChain": [run_json.summary(item) for item in facts.attempts],
                "upstreamRun": run_json.summary(upstream) if upstream else None,
                "upstreamRuns": [
                    {
                        "runId": item.run_id,
                        "scheduledJob": item.scheduled_job,
                        "status": item.status,
                    }
                    for item in facts.upstreams
                ],
                "waitingFor": (
                    {"reason": facts.wait.reason, "message": facts.wait.message}
                    if facts.wait
                    else None
                ),
                "start": _start_json(facts.start),
                "notifications": facts.notify.as_json() if facts.notify else None,
            }
        )
        return 0

    def shown(value: run_facts.Value) -> object:
        plain = run_facts.text(value)
        if isinstance(plain, datetime):
            return f"{output.local_time(plain, zone)}  ({output.utc_iso(plain)})"
        if isinstance(plain, timedelta):
            return output.duration(plain)
        return plain

    output.fields([(label, shown(value)) for label, value in facts.lines])
    if len(facts.attempts) > 1:
        print("\nRetry chain:")
        output.table(
            ["attempt", "run", "status", "reason", "scheduled", "finished", "job"],
            [
                [
                    item.attempt,
                    f"{item.id}{' *' if item.id == found.id else ''}",
                    item.status,
                    item.reason,
                    output.local_time(item.scheduled_for, zone),
                    output.local_time(item.finished_at, zone),
                    item.k8s_job_name,
                ]
                for item in facts.attempts
            ],
        )
    return 0


def _start_json(start: Start | None) -> dict[str, Any] | None:
    if start is None:
        return None
    return {
        "workloadStartedAt": start.workload_started_at,
        "waitingReason": start.waiting_reason,
        "waitingMessage": start.waiting_message,
        "awaitingAdmission": start.awaiting_admission,
        "boundAt": start.bound_at,
    }
