"""In-memory definitions and runs for the pure Kubernetes-layer tests (no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgsched.engine.models import Definition, Run
from pgsched.k8s.jobside.jobs import JobSettings

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

# The run API as the chart gives it: its Service's address, and a CA certificate made for
# these tests (its key was thrown away). Pods built with them reach no run API: the tests
# that use them look at the Job, not at what its pod says.
RUN_API_URL = "https://pgsched-run-api.pgsched.svc"
RUN_API_CA = """-----BEGIN CERTIFICATE-----
MIIBrDCCAVGgAwIBAgIUHqgYGBe1zEfLJt9/LC0nzFd3YLwwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXcGdzY2hlZC10ZXN0LXJ1bi1hcGktY2EwIBcNMjYxMjA2MDcz
NjI1WhgPMjEyNjExMTIwNzM2MjVaMCIxIDAeBgNVBAMMF3Bnc2NoZWQtdGVzdC1y
dW4tYXBpLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKZE4sXshA+H6wX6o
NdSi8GL94hwSB5SGMYIdqUWjI72RaIF5X/OKdJp1xbEwzKNb1+EV64xvNxMfMxhC
cwFN16NjMGEwHQYDVR0OBBYEFM6x8Ql0l9uVMgEU9582ne272w4eMB8GA1UdIwQY
MBaAFM6x8Ql0l9uVMgEU9582ne272w4eMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P
AQH/BAQDAgEGMAoGCCqGSM49BAMCA0kAMEYCIQDWGNro4sHtbmeWfcA9ynzvGLE/
Zwe0QHHz744URMxjCAIhAOWW7Gtv2uU4I7zW5MCtOcnXDPGLPO/nMay2n5WimG9w
-----END CERTIFICATE-----
"""


def job_settings(image: str = "ghcr.io/pgsched/pgsched:0.1.0", **overrides: Any) -> JobSettings:
    """The Job builder's settings, with the run API above."""
    return JobSettings(image=image, run_api_url=RUN_API_URL, run_api_ca=RUN_API_CA, **overrides)


def run_api_cert_dir(directory: Path) -> Path:
    """``directory`` laid out as the run API's TLS Secret is mounted, as far as the
    operator's settings read it: ``ca.crt`` alone (the server reads the pair)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_text(RUN_API_CA)
    return directory


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
