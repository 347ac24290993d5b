"""Labels, annotations and names that users, the CLI and tests rely on."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from pgsched import names as shared_names

# A Kubernetes object (or any part of one) as the API sends and takes it: decoded JSON.
Obj = dict[str, Any]

GROUP = "pgsched.dev"
VERSION = "v1alpha1"
PLURAL = "scheduledjobs"
KIND = "ScheduledJob"
API_VERSION = f"{GROUP}/{VERSION}"
POOL_PLURAL = "concurrencypools"
CALENDAR_PLURAL = "calendars"
NOTIFICATION_POLICY_PLURAL = "notificationpolicies"

LABEL_RUN_ID = f"{GROUP}/run-id"
LABEL_SCHEDULED_JOB = f"{GROUP}/scheduledjob"
LABEL_ATTEMPT = f"{GROUP}/attempt"
# A Job proves which claim of its run it belongs to by the SHA-256 of the lease token, never
# the token itself: anyone who may `get jobs` can read annotations, and the token is the
# run's credential. The token reaches the pod through the per-run Secret below.
ANNOTATION_LEASE_SHA256 = f"{GROUP}/lease-sha256"
# Jobs launched by releases before 0.2 carry the token itself here; still understood, and
# the resync removes it from Jobs that still run (see k8s/jobside/resync.py).
LEGACY_ANNOTATION_LEASE = f"{GROUP}/lease-token"
LEASE_SECRET_KEY = "lease-token"
ANNOTATION_SCHEDULED_FOR = f"{GROUP}/scheduled-for"
# What else a run's row holds that its Job must carry, so that a run whose row a failover
# lost entirely can be restored from its Job (k8s/failover/restoration.py,
# pgsched.restore_lost_run); with the run-id and attempt labels, scheduled-for, the
# namespace and the owner's uid (the definition's id). Absent when the run has none (a
# scheduled run has no retry-of).
ANNOTATION_TRIGGER = f"{GROUP}/trigger"
ANNOTATION_RETRY_OF = f"{GROUP}/retry-of"
ANNOTATION_UPSTREAM_RUN = f"{GROUP}/upstream-run-id"
ANNOTATION_REQUEST_TOKEN = f"{GROUP}/run-now-token"
# The values of spec.parameters the run was given (JSON, names to strings), as its row's
# pgsched.run_parameters held them: a restored run's retries run with them too.
ANNOTATION_PARAMETERS = f"{GROUP}/parameters"
# Requests to the operator, written on a ScheduledJob by `pgsched` or kubectl (so that
# Kubernetes RBAC and the API server's audit log apply); k8s/scheduledjobs/commands.py reads them.
ANNOTATION_RUN_NOW = f"{GROUP}/run-now"
ANNOTATION_CANCEL = f"{GROUP}/cancel"
ANNOTATION_BACKFILL = f"{GROUP}/backfill"
ANNOTATION_RESUME = f"{GROUP}/resume"
COMMAND_ANNOTATIONS = (
    ANNOTATION_RUN_NOW,
    ANNOTATION_CANCEL,
    ANNOTATION_BACKFILL,
    ANNOTATION_RESUME,
)
# Who wrote each request: its own annotation, so that two people's requests never borrow
# each other's name. The chart's ValidatingAdmissionPolicy (templates/requester-policy.yaml)
# refuses a request whose requester is not the user the API server authenticated.
REQUESTED_BY_SUFFIX = "-requested-by"


def requested_by_annotation(command: str) -> str:
    """``pgsched.dev/run-now`` -> ``pgsched.dev/run-now-requested-by``."""
    return command + REQUESTED_BY_SUFFIX


# The values of spec.parameters a run-now or backfill request gives: a JSON object beside
# the request, written with it (k8s/scheduledjobs/commands.py).
PARAMETERS_SUFFIX = "-parameters"
PARAMETERIZED_COMMANDS = (ANNOTATION_RUN_NOW, ANNOTATION_BACKFILL)


def parameters_annotation(command: str) -> str:
    """``pgsched.dev/run-now`` -> ``pgsched.dev/run-now-parameters``."""
    return command + PARAMETERS_SUFFIX


# An admission queue's label on a Job (Kueue): the queue that admits it (k8s.jobside.starts).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Why spec.suspend is true, written by `pgsched suspend --reason` (or kubectl annotate);
# shown in the Suspended condition, describe and the UI while the job is suspended.
ANNOTATION_SUSPEND_REASON = f"{GROUP}/suspend-reason"


SIDECAR_NAME = "pgsched-heartbeat"
SHARED_VOLUME = "pgsched"
SHARED_MOUNT = "/pgsched"
CANCEL_FILE = f"{SHARED_MOUNT}/cancel"
HEARTBEAT_LISTENING_FILE = f"{SHARED_MOUNT}/{shared_names.HEARTBEAT_LISTENING_FILE}"

_MAX_NAME = 63  # Job names become label values (job-name), which are capped at 63


def job_name(scheduled_job: str, run_id: int) -> str:
    """``<name>-<run-id>``, the ScheduledJob name shortened if needed so the whole fits."""
    suffix = f"-{run_id}"
    stem = scheduled_job[: _MAX_NAME - len(suffix)].rstrip("-.")
    return f"{stem}{suffix}"


def lease_secret_name(job: str) -> str:
    """The per-run Secret holding the lease token (Secret names may be 253 long)."""
    return f"{job}-lease"


def lease_fingerprint(token: UUID | str) -> str:
    return hashlib.sha256(str(token).encode()).hexdigest()


def job_lease_fingerprint(annotations: Mapping[str, Any] | None) -> str | None:
    """Which claim a Job was launched for: its fingerprint annotation, or (a Job of an
    older release) the fingerprint of the token it carries in the clear; None if neither."""
    annotations = annotations or {}
    fingerprint = annotations.get(ANNOTATION_LEASE_SHA256)
    if fingerprint:
        return str(fingerprint)
    legacy = annotations.get(LEGACY_ANNOTATION_LEASE)
    return lease_fingerprint(legacy) if legacy else None


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """A ScheduledJob name as a label value (names longer than 63 are truncated)."""
    value = text[:_MAX_NAME].rstrip("-_.")
    assert _LABEL_VALUE.match(value), value
    return value


def timestamp(text: object) -> datetime:
    """A Kubernetes timestamp (RFC 3339 with ``Z``, as the API server writes them) as an
    aware instant, UTC if it names no offset; ValueError if it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"not a timestamp: {text!r}")
    found = datetime.fromisoformat(text)
    return found if found.tzinfo else found.replace(tzinfo=UTC)
