"""A run as JSON, the same everywhere it is given whole: ``pgsched runs -o json``,
``describe -o json`` and the other CLI answers, and the Run API's ``status``
(k8s/runs_api). Everything but the lease token (a job's credential for its run)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from pgsched.engine import chain
from pgsched.engine.models import Run


def summary(
    item: Run,
    triggered: list[chain.Triggered] | None = None,
    upstreams: list[int] | None = None,
) -> dict[str, Any]:
    """A run as JSON: everything but the lease token (a job's credential for its run).
    ``upstreams``: every upstream run of a chained run (a fan-in has several)."""
    return {
        "id": item.id,
        "status": item.status,
        "reason": item.reason,
        "error": item.error,
        "attempt": item.attempt,
        "trigger": item.trigger,
        "retryOf": item.retry_of,
        "scheduledFor": item.scheduled_for,
        "notBefore": item.not_before,
        "parameters": item.parameters,
        "startedAt": item.started_at,
        "heartbeatAt": item.heartbeat_at,
        "finishedAt": item.finished_at,
        "durationSeconds": seconds(item),
        "exitCode": item.exit_code,
        "cancelRequested": item.cancel_requested,
        "cancelledBy": item.cancelled_by,
        "retryDecision": item.retry_decision,
        "jobName": item.k8s_job_name,
        "upstreamRunId": item.upstream_run_id,
        "upstreamRunIds": upstream_ids(item, upstreams),
        "triggeredRuns": [
            {"scheduledJob": down.scheduled_job, "runId": down.run_id, "status": down.status}
            for down in triggered or []
        ],
    }


def upstream_ids(item: Run, upstreams: list[int] | None) -> list[int]:
    """Every upstream run of a chained run: those given (a fan-in's), else the one it names."""
    if upstreams:
        return upstreams
    return [item.upstream_run_id] if item.upstream_run_id is not None else []


def seconds(item: Run) -> float | None:
    if item.started_at is None or item.finished_at is None:
        return None
    return (item.finished_at - item.started_at).total_seconds()


def utc_iso(moment: datetime | None) -> str | None:
    """``2026-06-01T06:00:00Z`` (microseconds kept only when there are any)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def from_utc_iso(text: str | None) -> datetime | None:
    """An instant :func:`utc_iso` (or the Kubernetes API) wrote, read back in UTC."""
    if not text:
        return None
    return datetime.fromisoformat(text).astimezone(UTC)


def encode(value: Any) -> Any:
    """``json.dumps``' default for what runs hold: instants as :func:`utc_iso`, durations
    as seconds, uuids as text."""
    if isinstance(value, datetime):
        return utc_iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def plain(data: Any) -> Any:
    """``data`` as JSON would read back: what an API answers with, written as the CLI
    writes it."""
    return json.loads(json.dumps(data, default=encode))
