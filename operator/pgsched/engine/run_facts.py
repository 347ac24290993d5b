"""One run as every screen shows it: the lines of ``pgsched describe`` and the UI's run page.

Both screens render the same :class:`Facts` (I13): a list of labelled values, in order,
whose parts may refer to other runs (the UI links them, describe prints their ids). A
line added here appears on both, so the run page cannot show less than describe (a run
page kept apart once lacked "by Replace" and the retry decision). Times stay ``datetime``
for each screen to print in the ScheduledJob's zone its own way; durations stay
``timedelta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from pgsched import wording
from pgsched.db import queries
from pgsched.engine import chain, deadlines, notifications, parameters, runs, starts, waits
from pgsched.engine.models import Definition, Run, Start

if TYPE_CHECKING:
    from pgsched.db.connection import Connection


@dataclass(frozen=True)
class RunLink:
    """Another run, named in a line: ``text`` says it (``run 17``), ``run_id`` finds it."""

    run_id: int
    text: str


Part = str | RunLink
Value = str | int | datetime | timedelta | tuple[Part, ...] | None


@dataclass(frozen=True)
class Facts:
    run: Run
    definition: Definition
    start: Start | None
    wait: waits.Wait | None
    attempts: list[Run]  # the retry chain, first to last (this run among them)
    upstreams: list[chain.UpstreamRun]
    triggered: list[chain.Triggered]
    requested_by: str | None
    notify: notifications.Effective | None
    lines: list[tuple[str, Value]]


def of_run(
    conn: Connection, run: Run, definition: Definition, *, now: datetime, zone: ZoneInfo
) -> Facts:
    """Everything about one run of ``definition``. ``zone`` words the times inside
    sentences (the cancellation's); ``now`` measures a running run and a wait."""
    attempts = [
        Run.from_row(row)
        for row in conn.execute(queries.get("retry_chain"), {"id": run.id}).fetchall()
    ]
    start = starts.of_run(conn, run.id)
    wait = waits.of_run(conn, run.id, now=now)
    upstreams = chain.upstream_runs(conn, run.id) if run.trigger == "upstream" else []
    triggered = chain.triggered(conn, [run.id]).get(run.id, [])
    requested_by = runs.requested_by(conn, run)
    finish_by = deadlines.finish_by(conn, [run.id]).get(run.id)
    notify = notifications.effective(conn, definition.id)
    lines = _lines(
        run,
        definition,
        start=start,
        wait=wait,
        attempts=attempts,
        upstreams=upstreams,
        triggered=triggered,
        requested_by=requested_by,
        finish_by=finish_by,
        notify=notify,
        now=now,
        zone=zone,
    )
    return Facts(
        run, definition, start, wait, attempts, upstreams, triggered, requested_by, notify, lines
    )


def _lines(
    run: Run,
    definition: Definition,
    *,
    start: Start | None,
    wait: waits.Wait | None,
    attempts: list[Run],
    upstreams: list[chain.UpstreamRun],
    triggered: list[chain.Triggered],
    requested_by: str | None,
    finish_by: deadlines.FinishBy | None,
    notify: notifications.Effective | None,
    now: datetime,
    zone: ZoneInfo,
) -> list[tuple[str, Value]]:
    by_id = {item.id: item for item in attempts}
    retried_as = next((item.id for item in attempts if item.retry_of == run.id), None)
    attempt: tuple[Part, ...] = (str(run.attempt),)
    if retried_as:
        attempt += (" (retried as ", RunLink(retried_as, f"run {retried_as}"), ")")
    retry_of: tuple[Part, ...] | None = None
    if run.retry_of is not None:
        earlier = by_id.get(run.retry_of)
        why = f" ({earlier.status}/{earlier.reason})" if earlier and earlier.reason else ""
        retry_of = (RunLink(run.retry_of, f"run {run.retry_of}"), why)
    cancel = None
    if run.cancel_requested and run.cancel_requested_at is not None:
        cancel = f"requested at {wording.local(run.cancel_requested_at, zone)}"
        if run.cancelled_by:
            cancel += f" by {run.cancelled_by}"
    job = run.k8s_job_name
    duration = None
    # A launching run has not run yet: its time since the claim is its pod's wait, which
    # the launching lines say (starts.described), not how long it ran.
    launching = starts.shown_status(run, start) == starts.LAUNCHING
    if (
        run.started_at is not None
        and (run.finished_at or run.status == "RUNNING")
        and not launching
    ):
        duration = (run.finished_at or now) - run.started_at
    return [
        ("Run", run.id),
        ("ScheduledJob", definition.key + (" (deleted)" if definition.deleted_at else "")),
        ("Status", starts.shown_status(run, start)),
        ("Reason", run.reason),
        ("Waiting for", wait.message if wait else None),
        ("Error", run.error),
        ("Exit code", run.exit_code),
        ("Attempt", attempt),
        ("Retry of", retry_of),
        ("Retry", run.retry_decision),
        ("Trigger", run.trigger),
        ("Requested by", requested_by),
        ("Parameters", parameters.shown(run.parameters)),
        ("Scheduled for", run.scheduled_for),
        ("Jittered start", run.not_before),
        ("Starting deadline", run.deadline_at),
        ("Finish by", _finish_by(run, finish_by, zone)),
        # The job's configuration now (a change notifies what is in force when it happens).
        ("Notifications", notify.summary if notify else None),
        ("Started", run.started_at),
        *starts.described(run, start),
        ("Last heartbeat", run.heartbeat_at),
        ("Finished", run.finished_at),
        ("Duration", duration),
        ("Cancellation", cancel),
        ("Kubernetes Job", f"{definition.namespace}/{job}" if job else None),
        # The run's output is its pod's: the Job is kept for the history limits.
        (
            "Logs",
            f"kubectl logs -n {definition.namespace} job/{job} --all-containers" if job else None,
        ),
        ("Request token", run.request_token),
        ("Upstream runs", _joined([_named(item) for item in upstreams])),
        ("Triggered runs", _joined([_named(item) for item in triggered])),
    ]


def _finish_by(run: Run, finish_by: deadlines.FinishBy | None, zone: ZoneInfo) -> Value:
    """spec.deadline's instant; once missed, a sentence saying so and that the run went on."""
    if finish_by is None:
        return None
    if finish_by.missed_at is None:
        return finish_by.deadline_at
    went_on = (
        f"finished at {wording.local(run.finished_at, zone)}"
        if run.finished_at
        else "still running"
    )
    return f"{wording.local(finish_by.deadline_at, zone)}: missed ({went_on}; not stopped)"


def _named(item: chain.UpstreamRun | chain.Triggered) -> tuple[Part, ...]:
    return (RunLink(item.run_id, str(item.run_id)), f" of {item.scheduled_job} ({item.status})")


def _joined(items: list[tuple[Part, ...]]) -> tuple[Part, ...] | None:
    if not items:
        return None
    parts: list[Part] = []
    for index, item in enumerate(items):
        parts += [", "] if index else []
        parts += item
    return tuple(parts)


def text(value: Value) -> str | int | datetime | timedelta | None:
    """A value with its run references as plain text (``run 17``), for describe."""
    if isinstance(value, tuple):
        return "".join(part.text if isinstance(part, RunLink) else part for part in value)
    return value
