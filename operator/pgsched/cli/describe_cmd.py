"""``pgsched describe <run-id>``: everything about one run, and its retry chain.

A run id is global (it is the row's key), so no namespace is needed. The retry chain
shows every attempt of the same occurrence, first to last, so a failure that was retried
three times reads as one story: reasons, errors and Job names of each attempt. The chain
of ``spec.after`` shows both ways: the upstream run that queued this one, and the
downstream runs this one's final outcome queued.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from pgsched.cli import common, output, runs_cmd
from pgsched.db import queries
from pgsched.engine import chain, definitions, parameters, runs, starts
from pgsched.engine.models import Run, Start
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
        attempts = [
            Run.from_row(row)
            for row in conn.execute(queries.get("retry_chain"), {"id": found.id}).fetchall()
        ]
        triggered = chain.triggered(conn, [found.id]).get(found.id, [])
        upstream = runs.get(conn, found.upstream_run_id) if found.upstream_run_id else None
        upstream_of = definitions.get(conn, upstream.definition_id) if upstream else None
        requested_by = runs.requested_by(conn, found)
        start = starts.of_run(conn, found.id)
    assert definition is not None  # job_runs.definition_id is a foreign key
    if args.output == "json":
        output.emit_json(
            {
                "run": runs_cmd.summary(found, triggered),
                "requestedBy": requested_by,
                "scheduledJob": {
                    "namespace": definition.namespace,
                    "name": definition.name,
                    "uid": definition.id,
                    "timeZone": definition.time_zone,
                    "deleted": definition.deleted_at is not None,
                },
                "retryChain": [runs_cmd.summary(item) for item in attempts],
                "upstreamRun": runs_cmd.summary(upstream) if upstream else None,
                "start": _start_json(start),
            }
        )
        return 0
    zone = zones.load_zone(definition.time_zone)

    def when(moment: Any) -> str:
        if moment is None:
            return output.NOTHING
        return f"{output.local_time(moment, zone)}  ({output.utc_iso(moment)})"

    retried_as = next((item.id for item in attempts if item.retry_of == found.id), None)
    attempt = f"{found.attempt}" + (f" (retried as run {retried_as})" if retried_as else "")
    deleted = " (deleted)" if definition.deleted_at is not None else ""
    cancel = output.NOTHING
    if found.cancel_requested:
        cancel = f"requested at {output.local_time(found.cancel_requested_at, zone)}"
        if found.cancelled_by:
            cancel += f" by {found.cancelled_by}"
    job = f"{definition.namespace}/{found.k8s_job_name}" if found.k8s_job_name else None
    # The run's output is its pod's: the Job is kept for the ScheduledJob's history limits.
    logs = (
        f"kubectl logs -n {definition.namespace} job/{found.k8s_job_name} --all-containers"
        if found.k8s_job_name
        else None
    )
    output.fields(
        [
            ("Run", found.id),
            ("ScheduledJob", f"{definition.key}{deleted}"),
            ("Status", starts.shown_status(found, start)),
            ("Reason", found.reason),
            ("Error", found.error),
            ("Exit code", found.exit_code),
            ("Attempt", attempt),
            ("Retry of", found.retry_of),
            ("Retry", found.retry_decision),
            ("Trigger", found.trigger),
            ("Requested by", requested_by),
            ("Parameters", parameters.shown(found.parameters)),
            ("Scheduled for", when(found.scheduled_for)),
            ("Jittered start", when(found.not_before) if found.not_before else None),
            ("Starting deadline", when(found.deadline_at)),
            ("Started", when(found.started_at)),
            *[
                (label, when(value) if isinstance(value, datetime) else value)
                for label, value in starts.described(found, start)
            ],
            ("Last heartbeat", when(found.heartbeat_at)),
            ("Finished", when(found.finished_at)),
            ("Duration", runs_cmd.duration_of(found)),
            ("Cancellation", cancel),
            ("Kubernetes Job", job),
            ("Logs", logs),
            ("Request token", found.request_token),
            (
                "Upstream run",
                f"{upstream.id} of {upstream_of.key} ({upstream.status})"
                if upstream and upstream_of
                else None,
            ),
            (
                "Triggered runs",
                ", ".join(f"{t.run_id} of {t.scheduled_job} ({t.status})" for t in triggered),
            ),
        ]
    )
    if len(attempts) > 1:
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
                for item in attempts
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
