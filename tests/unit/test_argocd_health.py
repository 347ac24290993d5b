"""The Argo CD health checks (deploy/argocd/*.lua) in real Lua, on statuses rendered by the
operator's own renderer (pgsched.k8s.reporting.status); tests/cluster/test_argocd_health_live.py runs
them on statuses a running operator wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from argocd_health import CHECKS, health
from k8sfixtures import T0, definition, run
from pgsched.k8s.reporting import status


def scheduled_job(rendered: dict[str, Any] | None, *, generation: int = 1) -> dict[str, Any]:
    """The resource as Argo CD gets it from the API server: JSON, nulls and all."""
    obj = {
        "apiVersion": "pgsched.dev/v1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-report", "namespace": "jobs", "generation": generation},
        "spec": {"schedule": "0 2 * * *"},
        "status": rendered,
    }
    return json.loads(json.dumps(obj, default=str))


def verdict(of=None, *, generation: int = 1, **render: Any) -> tuple[str, str]:
    rendered = status.render(of or definition(), now=T0, **{"active": 0, **render})
    found = health("scheduledjob", scheduled_job(rendered, generation=generation))
    return found.status, found.message


def test_a_valid_job_that_never_ran_is_healthy_and_says_when_it_runs():
    assert verdict(last_run=None) == (
        "Healthy",
        "Scheduled; no run yet; next run at 2026-06-01T23:00:00Z",
    )


def test_a_running_or_succeeded_job_is_healthy():
    for last in (run(status="RUNNING"), run(status="COMPLETED", finished_at=T0)):
        state, message = verdict(last_run=last, active=1 if last.status == "RUNNING" else 0)
        assert state == "Healthy"
        assert f"last run 42 {last.status}" in message


def test_a_spec_the_operator_has_not_validated_yet_is_progressing():
    assert health("scheduledjob", scheduled_job(None)).status == "Progressing"
    # A new generation applied, the status still of the one before.
    state, message = verdict(last_run=None, generation=2)
    assert (state, message) == (
        "Progressing",
        "Waiting for the pgsched operator to validate generation 2",
    )


def test_an_invalid_spec_is_degraded_with_the_operators_message():
    message = 'spec.schedule: minute value 61 in "61" is out of range 0-59 (example: */15 * * * *)'
    rendered = status.render_rejected(
        {"schedule": "61 * * * *"}, generation=1, message=message, now=T0, current=None
    )
    assert health("scheduledjob", scheduled_job(rendered)) == ("Degraded", message)
    # A later generation rejected while an earlier one stays in force: still Degraded.
    kept = definition(generation=1, rejected_generation=2, rejection=message)
    state, said = verdict(kept, generation=2, last_run=None)
    assert state == "Degraded" and "generation 2 was rejected" in said


def test_a_job_suspended_by_its_spec_is_suspended():
    assert verdict(definition(suspended=True), last_run=None) == (
        "Suspended",
        "spec.suspend is true",
    )


def test_a_job_suspended_for_its_failures_is_degraded_until_someone_resumes_it():
    stopped = definition(
        auto_suspended_at=T0,
        auto_suspend_reason="3 consecutive runs failed (failureSuspendThreshold is 3)",
    )
    state, message = verdict(stopped, last_run=run(status="FAILED", reason="NonZeroExit"))
    assert state == "Degraded"
    assert message.startswith("Suspended automatically: 3 consecutive runs failed")
    assert "pgsched resume" in message


def test_one_failed_run_is_healthy_and_named_in_the_message():
    failed = run(status="FAILED", reason="NonZeroExit", finished_at=T0, settled_at=T0)
    assert verdict(last_run=failed) == (
        "Healthy",
        "Last run 42 failed (NonZeroExit); next run at 2026-06-01T23:00:00Z",
    )


def test_a_missing_pool_or_upstream_is_degraded():
    pooled = definition(spec={"pool": "warehouse"})
    state, message = verdict(pooled, last_run=None, pool_found=False)
    assert state == "Degraded" and "ConcurrencyPool warehouse does not exist" in message
    assert verdict(pooled, last_run=None, pool_found=True)[0] == "Healthy"


def test_a_one_shot_is_degraded_only_when_it_ended_failed():
    fired = definition(schedule_kind="once", schedule="2026-06-01T12:00:00Z", next_run_at=None)
    due = definition(schedule_kind="once", schedule="2026-06-01T23:00:00Z")
    succeeded = run(status="COMPLETED", finished_at=T0, settled_at=T0)
    failed = run(status="FAILED", reason="NonZeroExit", finished_at=T0, settled_at=T0)
    assert verdict(due, last_run=None)[0] == "Healthy"
    assert verdict(fired, last_run=succeeded)[0] == "Healthy"
    state, message = verdict(fired, last_run=failed)
    assert state == "Degraded" and message.startswith("One-shot done: run 42 (attempt 1) ended")


def test_a_rule_that_ran_out_is_healthy_and_says_nothing_more_runs():
    finished = definition(
        schedule_kind="rrule",
        schedule="DTSTART:20200101T000000\nRRULE:FREQ=DAILY;COUNT=3",
        next_run_at=None,
    )
    state, message = verdict(finished, last_run=None)
    assert state == "Healthy" and message.endswith("no more runs")


def test_messages_reach_argo_cd_unchanged():
    reason = 'ab"c\\d — Zürich\n\t'
    rendered = status.render_rejected(
        {"schedule": "x"},
        generation=1,
        message=reason,
        now=datetime(2026, 6, 1, tzinfo=UTC),
        current=None,
    )
    assert health("scheduledjob", scheduled_job(rendered)).message == reason


def pool(status_: dict[str, Any] | None, *, limit: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "pgsched.dev/v1",
        "kind": "ConcurrencyPool",
        "metadata": {"name": "warehouse", "namespace": "jobs", "generation": 1},
        "spec": {"limit": limit},
        **({"status": status_} if status_ is not None else {}),
    }


def test_a_pool_is_progressing_until_the_operator_reports_it_then_healthy_even_when_full():
    assert health("concurrencypool", pool(None)).status == "Progressing"
    assert health("concurrencypool", pool({"running": 0, "queued": 0, "jobs": 0})) == (
        "Healthy",
        "0 of 2 running, 0 queued, 0 ScheduledJobs",
    )
    full = health("concurrencypool", pool({"running": 2, "queued": 3, "jobs": 4}))
    assert full == (
        "Healthy",
        "2 of 2 running, 3 queued, 4 ScheduledJobs (full: queued runs wait for room)",
    )


def test_the_argocd_cm_snippet_in_the_docs_is_the_checks_verbatim():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "argocd.md").read_text()
    snippet = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(snippet)["data"]
    assert data == {
        f"resource.customizations.health.pgsched.dev_{kind}": (
            CHECKS / f"health-{name}.lua"
        ).read_text()
        for kind, name in (("ScheduledJob", "scheduledjob"), ("ConcurrencyPool", "concurrencypool"))
    }
