"""Requests written on a ScheduledJob as annotations: read, checked, carried out, answered.

Annotations are how anyone asks the operator to act on a ScheduledJob through the
Kubernetes API server, so that Kubernetes RBAC (``patch scheduledjobs`` in its namespace)
and the API server's audit log apply. ``pgsched run-now``, ``cancel``, ``backfill`` and
``resume`` write them by default; ``kubectl annotate`` does the same. Each request may
carry parameters (``<annotation>-parameters``) and who asked (``<annotation>-requested-by``).

A request is removed once handled, and only once every connected standby has flushed the
commit that carried it out, so a failover cannot lose it; carrying one out twice is
harmless. A value that is not accepted changes nothing and is answered with an
``InvalidAnnotation`` Warning Event.

The accepted values, the durability wait and who may write what:
docs/architecture.md, "Requests by annotation".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgsched import logs
from pgsched.engine import backfill, definitions, parameters, runs
from pgsched.engine.models import Definition
from pgsched.k8s import names
from pgsched.schedule import window as windows
from pgsched.validation import FieldError

log = logging.getLogger(__name__)

MAX_TOKEN = 200
MAX_REQUESTER = 256
MAX_BACKFILL = 100  # two RFC 3339 instants and a slash, with room for fractions and offsets
MAX_PARAMETERS_JSON = 16384
EXAMPLES = {
    names.ANNOTATION_RUN_NOW: "deploy-1234",
    names.ANNOTATION_CANCEL: "all",
    names.ANNOTATION_BACKFILL: "2026-06-01T00:00:00Z/2026-06-07T23:59:59Z",
    names.ANNOTATION_RESUME: "true",
}
# Refused requests are answered with a Warning Event of this reason.
REASON = "InvalidAnnotation"
# A request carried out and kept for the standbys longer than a few seconds is announced
# with a Normal Event of this reason.
WAITING_REASON = "WaitingForStandby"


@dataclass(frozen=True)
class Request:
    annotation: str  # names.ANNOTATION_*
    value: str
    requested_by: str | None  # the value of its -requested-by annotation, if any
    parameters: str | None = None  # the value of its -parameters annotation, if any

    @property
    def requester_annotation(self) -> str:
        return names.requested_by_annotation(self.annotation)

    @property
    def parameters_annotation(self) -> str:
        return names.parameters_annotation(self.annotation)


@dataclass(frozen=True)
class Answer:
    """What handling a ScheduledJob's requests asks Kubernetes for."""

    refused: tuple[FieldError, ...] = ()  # each one a Warning Event
    resumed: bool = False  # an automatic suspension was cleared: render the status


def event_name(scheduled_job: str, annotation: str, version: str) -> str:
    """The Warning Event answering a refused request (or requester) ``annotation`` written
    in ``version`` of the ScheduledJob: every replica names it alike (posted once), and the
    writer can find it (``pgsched`` reads it to report the refusal)."""
    return f"{scheduled_job}.{annotation.rpartition('/')[2]}.{version}"


def waiting_event_name(scheduled_job: str, annotation: str, version: str) -> str:
    """The Normal Event saying the request ``annotation`` written in ``version`` was
    carried out and waits for the standbys (``pgsched`` reads it when its wait ends)."""
    return f"{event_name(scheduled_job, annotation, version)}.waiting"


def read(annotations: Mapping[str, Any]) -> list[Request]:
    """The requests present on a ScheduledJob, in a fixed order."""
    found = []
    for annotation in names.COMMAND_ANNOTATIONS:
        value = annotations.get(annotation)
        if value is None:
            continue
        requester = annotations.get(names.requested_by_annotation(annotation))
        given = (
            annotations.get(names.parameters_annotation(annotation))
            if annotation in names.PARAMETERIZED_COMMANDS
            else None
        )
        found.append(
            Request(
                annotation,
                str(value),
                None if requester is None else str(requester),
                None if given is None else str(given),
            )
        )
    return found


def parameters_value(values: dict[str, str]) -> str:
    """The ``<request>-parameters`` value for these values (what the CLI writes)."""
    return json.dumps(values, ensure_ascii=False, sort_keys=True)


def backfill_value(start: datetime, end: datetime) -> str:
    """The ``pgsched.dev/backfill`` value for a range (what the CLI writes)."""
    return f"{start.isoformat()}/{end.isoformat()}"


def parse_backfill(value: str) -> tuple[datetime, datetime]:
    """``<from>/<to>`` as two aware instants; ValueError saying what is wrong."""
    if len(value) > MAX_BACKFILL:
        raise ValueError(f"is {len(value)} characters long, more than {MAX_BACKFILL}")
    start_text, slash, end_text = value.partition("/")
    if not slash:
        raise ValueError(f"{_shown(value)} is not <from>/<to>")
    return windows.parse_instant(start_text), windows.parse_instant(end_text)


def handle(
    conn: Any,
    definition: Definition,
    requests: list[Request],
    *,
    now: datetime,
) -> Answer:
    """Carry out the requests on ``definition`` (in force) and say what to answer."""
    refused: list[FieldError] = []
    resumed = False
    for request in requests:
        problem = _requester_problem(request) or _carry_out(conn, definition, request, now=now)
        if problem is not None:
            # Logged where its Event is posted: by the one replica that posts it.
            refused.append(problem)
        elif request.annotation == names.ANNOTATION_RESUME:
            resumed = True
    return Answer(tuple(refused), resumed)


def _carry_out(
    conn: Any, definition: Definition, request: Request, *, now: datetime
) -> FieldError | None:
    if request.annotation == names.ANNOTATION_RUN_NOW:
        return _run_now(conn, definition, request)
    if request.annotation == names.ANNOTATION_CANCEL:
        return _cancel(conn, definition, request)
    if request.annotation == names.ANNOTATION_BACKFILL:
        return _backfill(conn, definition, request, now=now)
    return _resume(conn, definition, request, now=now)


def _run_now(conn: Any, definition: Definition, request: Request) -> FieldError | None:
    token = request.value
    if not token.strip() or len(token) > MAX_TOKEN or not token.isprintable():
        return _refusal(
            request,
            f"{_shown(token)} is not a token of 1 to {MAX_TOKEN} characters without"
            " control characters",
        )
    values = _parameters(definition, request)
    if isinstance(values, FieldError):
        return values
    enqueued = runs.run_now(
        conn,
        definition.id,
        token=f"annotation:{token}",
        requested_by=request.requested_by,
        parameters=values,
    )
    if enqueued.created:
        _logger(definition, enqueued.run).info(
            "%s: run-now %r queued run %s (requested by %s)",
            definition.key,
            token,
            enqueued.run.id,
            request.requested_by or "an unknown user",
        )
    return None


def _cancel(conn: Any, definition: Definition, request: Request) -> FieldError | None:
    target = request.value
    why = f"cancelled through the {names.ANNOTATION_CANCEL} annotation"
    by = runs.BY_ANNOTATION + (f" ({request.requested_by})" if request.requested_by else "")
    if target == "all":
        outcome = runs.cancel_definition(conn, definition.id, by=by, why=why)
        logger: logging.Logger | logs.ContextAdapter = log
    elif target.isdigit() and len(target) <= 18:
        run = runs.get(conn, int(target))
        if run is None or run.definition_id != definition.id:
            return _refusal(request, f"run {target} is not a run of {definition.key}")
        outcome = runs.cancel_run(conn, run.id, by=by, why=why)
        logger = _logger(definition, run)
    else:
        return _refusal(request, f'{_shown(target)} is not a run id or "all"')
    logger.info(
        "%s: cancel %s by %s: %d queued runs cancelled, %d running runs asked to stop",
        definition.key,
        target,
        request.requested_by or "an unknown user",
        len(outcome.cancelled),
        len(outcome.asked_to_stop),
    )
    return None


def _backfill(
    conn: Any, definition: Definition, request: Request, *, now: datetime
) -> FieldError | None:
    try:
        start, end = parse_backfill(request.value)
        wanted = backfill.occurrences(
            definitions.schedule_of(definition),
            start,
            end,
            now=now,
            first=f"from {start.isoformat()}",
            last=f"to {end.isoformat()}",
            subject=definition.key,
        )
    except ValueError as error:  # backfill.RangeError too
        return _refusal(request, str(error))
    values = _parameters(definition, request)
    if isinstance(values, FieldError):
        return values
    queued, already = backfill.queue(
        conn, definition, wanted, requested_by=request.requested_by, parameters=values
    )
    log.info(
        "%s: backfill %s by %s: %d occurrences, %d queued, %d queued before",
        definition.key,
        request.value,
        request.requested_by or "an unknown user",
        len(wanted),
        queued,
        already,
    )
    return None


def _resume(
    conn: Any, definition: Definition, request: Request, *, now: datetime
) -> FieldError | None:
    if request.value != "true":
        return _refusal(request, f'{_shown(request.value)} is not "true"')
    if definition.auto_suspended_at is not None:
        definitions.clear_auto_suspension(conn, definition.id, now=now)
        log.info(
            "%s: automatic suspension cleared by %s (%s)",
            definition.key,
            request.requested_by or "an unknown user",
            definition.auto_suspend_reason,
        )
    return None


def _parameters(definition: Definition, request: Request) -> dict[str, str] | FieldError:
    """The request's parameter values, checked against the spec's declarations; or the
    refusal naming the ``-parameters`` annotation, every problem in one message."""
    if request.parameters is None:
        return {}
    where = request.parameters_annotation
    declared = parameters.declared(definition.spec)
    right = f"{where}={parameters_value(parameters.example(declared))}"
    if len(request.parameters) > MAX_PARAMETERS_JSON:
        return FieldError(
            where,
            f"is {len(request.parameters)} characters long, more than {MAX_PARAMETERS_JSON}",
            right,
        )
    try:
        given = json.loads(request.parameters)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        return FieldError(
            where, f"{_shown(request.parameters)} is not a JSON object of names to values", right
        )
    problems = parameters.check(declared, given)
    if problems:
        listed = "; ".join(f"{_shown(item.name)} {item.message}" for item in problems)
        return FieldError(
            where, f"{listed}; {request.annotation} of {definition.key} was not carried out", right
        )
    return given


def _requester_problem(request: Request) -> FieldError | None:
    who = request.requested_by
    if who is None or (0 < len(who) <= MAX_REQUESTER and who.isprintable() and who.strip()):
        return None
    return FieldError(
        request.requester_annotation,
        f"{_shown(who)} is not a user name of 1 to {MAX_REQUESTER} printable characters;"
        f" {request.annotation} was not carried out",
        f"{request.requester_annotation}=$(kubectl auth whoami -o jsonpath="
        "'{.status.userInfo.username}')",
    )


def _refusal(request: Request, problem: str) -> FieldError:
    return FieldError(
        request.annotation, problem, f"{request.annotation}={EXAMPLES[request.annotation]}"
    )


def _shown(value: str) -> str:
    """A value as the message quotes it: JSON-escaped (no control characters reach a log
    line or an Event), cut at 80 characters."""
    cut = value if len(value) <= 80 else value[:80] + "…"
    return json.dumps(cut, ensure_ascii=False)


def _logger(definition: Definition, run: Any) -> logs.ContextAdapter:
    return logs.for_labels(
        log,
        run_id=run.id,
        namespace=definition.namespace,
        name=definition.name,
        attempt=run.attempt,
    )
