"""Suspend with a reason: the pgsched.dev/suspend-reason annotation, stored by the sync,
shown in the Suspended condition, the skipped rows and `pgsched next`; gone on resume."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cli_runner import pgsched
from pgsched.db import connection
from pgsched.engine import definitions, materialize
from pgsched.k8s.client.finalizers import FINALIZER
from pgsched.k8s.reporting import status
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjobs, suspension
from plugins.no_requests import NoRequests

REASON = "pgsched.dev/suspend-reason"


@pytest.fixture
def context(dsn: str) -> Iterator[scheduledjobs.Context]:
    with connection.pool(dsn, name="pgsched-test-suspension", max_size=2) as pool:
        yield scheduledjobs.Context(
            pool=pool,
            kube=NoRequests(),  # type: ignore[arg-type]
            publisher=Publisher(None),  # type: ignore[arg-type]
            clock=lambda: None,
        )


def body(
    uid: str,
    *,
    suspend: bool,
    annotations: dict[str, str],
    shown: str | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "etl",
            "namespace": "jobs",
            "uid": uid,
            "generation": generation,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER],
            "annotations": annotations,
        },
        "spec": {
            "schedule": "* * * * *",
            "suspend": suspend,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}},
        },
        "status": {"observedGeneration": generation, "suspendReason": shown},
    }


def suspended_condition(definition) -> dict[str, Any]:
    rendered = status.render(definition, last_run=None, active=0, now=datetime.now(UTC))
    [condition] = [item for item in rendered["conditions"] if item["type"] == "Suspended"]
    return {**condition, "suspendReason": rendered["suspendReason"]}


def test_a_reason_given_with_suspend_is_shown_everywhere_until_resume(context, conn, dsn):
    uid = str(uuid.uuid4())
    scheduledjobs.sync(context, body(uid, suspend=False, annotations={}), revalidate=True)
    # `pgsched suspend --reason` writes spec.suspend and the annotation in one patch: a new
    # generation whose status does not show the reason yet.
    why = {REASON: "warehouse migration, back on Monday"}
    synced = scheduledjobs.sync(
        context, body(uid, suspend=True, annotations=why, generation=2), revalidate=False
    )
    assert synced.writes is not None and synced.writes.refresh
    stored = definitions.get(conn, uuid.UUID(uid))
    assert stored.suspend_reason == "warehouse migration, back on Monday"
    condition = suspended_condition(stored)
    assert (condition["status"], condition["reason"]) == ("True", "SuspendedBySpec")
    assert condition["message"] == "spec.suspend is true: warehouse migration, back on Monday"
    assert condition["suspendReason"] == "warehouse migration, back on Monday"

    conn.execute(
        "UPDATE pgsched.job_definitions SET next_run_at = now() - interval '1 minute'"
        " WHERE id = %s",
        [stored.id],
    )
    materialize.run_once(conn, now=datetime.now(UTC) + timedelta(seconds=1))
    [row] = conn.execute(
        "SELECT status, reason, error FROM pgsched.job_runs WHERE definition_id = %s", [stored.id]
    ).fetchall()
    assert (row["status"], row["reason"]) == ("SKIPPED", "Suspended")
    assert row["error"].endswith("spec.suspend is true: warehouse migration, back on Monday")
    shown = pgsched("next", "etl", "--namespace", "jobs", dsn=dsn)
    assert "suspended (spec.suspend is true: warehouse migration, back on Monday)" in shown.out

    # Once the status shows it, a watch event of the same object costs nothing.
    echoed = body(uid, suspend=True, annotations=why, generation=2, shown=stored.suspend_reason)
    assert scheduledjobs.sync(context, echoed, revalidate=False).writes is None

    # `pgsched resume` removes the annotation in the patch that sets spec.suspend false.
    scheduledjobs.sync(
        context,
        body(uid, suspend=False, annotations={}, generation=3, shown=stored.suspend_reason),
        revalidate=False,
    )
    resumed = definitions.get(conn, stored.id)
    assert resumed.suspend_reason is None
    assert suspended_condition(resumed)["reason"] == "Active"


def test_changing_only_the_reason_is_stored_without_a_new_generation(context, conn):
    uid = str(uuid.uuid4())
    scheduledjobs.sync(context, body(uid, suspend=True, annotations={}), revalidate=True)
    scheduledjobs.sync(
        context, body(uid, suspend=True, annotations={REASON: "disk full"}), revalidate=False
    )
    stored = definitions.get(conn, uuid.UUID(uid))
    assert stored.suspend_reason == "disk full" and stored.generation == 1


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("  line one\nline two\x1b[31m  ", "line one line two [31m"),
        ("x" * 300, "x" * 255 + "…"),
        ("   ", None),
    ],
)
def test_a_reason_is_hostile_text_made_safe_to_show(value, stored):
    assert suspension.reason_of({REASON: value}) == stored
