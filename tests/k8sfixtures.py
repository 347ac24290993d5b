"""In-memory definitions and runs for the pure Kubernetes-layer tests (no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pgsched.engine.models import Definition, Run

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

TEMPLATE = {
    "metadata": {"labels": {"team": "data"}},
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "report"}},
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "command": ["sh", "-c", "echo hi"]}
                ]
            },
        }
    },
}


def definition(**overrides: Any) -> Definition:
    values: dict[str, Any] = {
        "id": uuid.UUID("11111111-2222-3333-4444-555555555555"),
        "namespace": "jobs",
        "name": "nightly-report",
        "generation": 1,
        "schedule_kind": "cron",
        "schedule": "0 2 * * *",
        "time_zone": "Europe/Sofia",
        "dst_gap": "shift",
        "dst_repeat": "first",
        "anchor": T0,
        "catch_up": "latest",
        "catch_up_limit": 100,
        "starting_deadline_seconds": None,
        "max_concurrent_runs": 1,
        "max_queued_runs": None,
        "concurrency_policy": "Queue",
        "active_deadline_seconds": None,
        "retry_policy": {},
        "heartbeat_interval_seconds": 10,
        "heartbeat_timeout_seconds": 60,
        "orphan_timeout_seconds": 300,
        "cancel_grace_seconds": 30,
        "failure_suspend_threshold": None,
        "consecutive_failures": 0,
        "suspended": False,
        "auto_suspended_at": None,
        "auto_suspend_reason": None,
        "spec": {"jobTemplate": TEMPLATE},
        "next_run_at": datetime(2026, 6, 1, 23, 0, tzinfo=UTC),
        "last_scheduled_for": None,
        "deleted_at": None,
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(overrides)
    return Definition(**values)


def run(**overrides: Any) -> Run:
    values: dict[str, Any] = {
        "id": 42,
        "definition_id": uuid.UUID("11111111-2222-3333-4444-555555555555"),
        "status": "RUNNING",
        "trigger": "schedule",
        "scheduled_for": T0,
        "deadline_at": None,
        "attempt": 1,
        "retry_of": None,
        "request_token": None,
        "lease_token": uuid.UUID("99999999-8888-7777-6666-555555555555"),
        "started_at": T0,
        "heartbeat_at": None,
        "finished_at": None,
        "cancel_requested": False,
        "cancel_requested_at": None,
        "reason": None,
        "error": None,
        "exit_code": None,
        "retry_hint": None,
        "k8s_job_name": None,
        "settled_at": None,
        "created_at": T0,
        "cancelled_by": None,
        "retry_decision": None,
    }
    values.update(overrides)
    return Run(**values)
