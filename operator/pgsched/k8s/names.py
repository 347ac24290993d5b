"""Labels, annotations and names that users, the CLI and tests rely on."""

from __future__ import annotations

import re
from typing import Any

# A Kubernetes object (or any part of one) as the API sends and takes it: decoded JSON.
Obj = dict[str, Any]

GROUP = "pgsched.dev"
VERSION = "v1alpha1"
PLURAL = "scheduledjobs"
KIND = "ScheduledJob"
API_VERSION = f"{GROUP}/{VERSION}"
POOL_PLURAL = "concurrencypools"

LABEL_RUN_ID = f"{GROUP}/run-id"
LABEL_SCHEDULED_JOB = f"{GROUP}/scheduledjob"
LABEL_ATTEMPT = f"{GROUP}/attempt"
ANNOTATION_LEASE = f"{GROUP}/lease-token"
ANNOTATION_SCHEDULED_FOR = f"{GROUP}/scheduled-for"
ANNOTATION_RUN_NOW = f"{GROUP}/run-now"
ANNOTATION_CANCEL = f"{GROUP}/cancel"

SIDECAR_NAME = "pgsched-heartbeat"
SHARED_VOLUME = "pgsched"
SHARED_MOUNT = "/pgsched"
CANCEL_FILE = f"{SHARED_MOUNT}/cancel"

_MAX_NAME = 63  # Job names become label values (job-name), which are capped at 63


def job_name(scheduled_job: str, run_id: int) -> str:
    """``<name>-<run-id>``, the ScheduledJob name shortened if needed so the whole fits."""
    suffix = f"-{run_id}"
    stem = scheduled_job[: _MAX_NAME - len(suffix)].rstrip("-.")
    return f"{stem}{suffix}"


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """A ScheduledJob name as a label value (names longer than 63 are truncated)."""
    value = text[:_MAX_NAME].rstrip("-_.")
    assert _LABEL_VALUE.match(value), value
    return value
