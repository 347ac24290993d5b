"""Each spec default is stated once in Python (``engine.definitions.DefinitionSpec`` and
``engine.retry.RetryPolicy``, which ``spec.parse`` reads its defaults from; the history
limits in ``k8s.jobside.cleanup``) and must be the CRD's, which the API server applies and
docs/configuration.md renders."""

from __future__ import annotations

from pathlib import Path

import yaml

from pgsched.engine import starts
from pgsched.engine.definitions import DefinitionSpec
from pgsched.engine.retry import RetryPolicy
from pgsched.k8s.jobside import cleanup

CRD = Path(__file__).parents[2] / "crds" / "scheduledjobs.pgsched.dev.yaml"
FIELDS = {
    "timeZone": "time_zone",
    "dstPolicy.gap": "dst_gap",
    "dstPolicy.repeat": "dst_repeat",
    "suspend": "suspend",
    "maxConcurrentRuns": "max_concurrent_runs",
    "concurrencyPolicy": "concurrency_policy",
    "catchUp": "catch_up",
    "catchUpLimit": "catch_up_limit",
    "cancelGraceSeconds": "cancel_grace_seconds",
    "heartbeat.intervalSeconds": "heartbeat_interval_seconds",
}
POLICY = RetryPolicy()
OTHERS = {
    "retryPolicy.maxAttempts": POLICY.max_attempts,
    "retryPolicy.backoff.initialSeconds": POLICY.backoff.initial_seconds,
    "retryPolicy.backoff.maxSeconds": POLICY.backoff.max_seconds,
    "retryPolicy.backoff.multiplier": POLICY.backoff.multiplier,
    "retryPolicy.backoff.jitter": POLICY.backoff.jitter,
    "successfulRunsHistoryLimit": cleanup.SUCCESSFUL_RUNS_HISTORY_LIMIT,
    "failedRunsHistoryLimit": cleanup.FAILED_RUNS_HISTORY_LIMIT,
    "startTimeoutSeconds": starts.START_TIMEOUT_SECONDS,
    "admissionTimeoutSeconds": starts.ADMISSION_TIMEOUT_SECONDS,
}


def crd_default(path: str) -> object:
    document = yaml.safe_load(CRD.read_text())
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for part in path.split("."):
        schema = schema["properties"][part]
    return schema.get("default")


def test_the_spec_defaults_are_the_crds():
    python = {path: getattr(DefinitionSpec, name) for path, name in FIELDS.items()} | OTHERS
    wrong = {
        path: (crd_default(path), value)
        for path, value in python.items()
        if crd_default(path) != value
    }
    assert not wrong, f"CRD default vs DefinitionSpec default: {wrong}"
