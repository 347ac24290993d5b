"""``kubectl create --dry-run=server`` and ``kubectl delete --dry-run=server`` of a Run, against
the real database: everything is checked, the answer is what would happen, and nothing
does (no run queued, none cancelled)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from db.test_notifications import claimed_run
from factories import define
from pgsched.db import connection
from pgsched.k8s.access import User
from pgsched.k8s.runs_api.actions import Actions, Invalid

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NEVER_DUE = "0 3 1 1 *"
ALICE = User("alice")


@pytest.fixture
def actions(dsn, runs_reader):
    pool = connection.pool(dsn, name="test-runs-api-actions", max_size=2)
    yield Actions(pool, runs_reader)
    pool.close()


def body(name: str, **parameters: str) -> dict:
    return {
        "apiVersion": "runs.pgsched.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": {"scheduledJob": "report", "parameters": parameters},
    }


def count_runs(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM pgsched.job_runs").fetchone()["n"]


def test_a_dry_run_create_answers_the_run_and_queues_nothing(conn, actions):
    define(conn, "report", namespace="team", schedule=NEVER_DUE, now=T0,
           parameters=[{"name": "region", "pattern": "eu|us", "default": "eu"}])  # fmt: skip
    found, created = actions.create("team", body("report-now", region="us"), ALICE, dry_run=True)
    assert created and found.name == "report-now" and found.run.status == "QUEUED"
    assert found.run.parameters == {"region": "us"} and found.requested_by == "alice"
    assert count_runs(conn) == 0
    assert conn.execute("SELECT count(*) AS n FROM pgsched.run_events").fetchone()["n"] == 0
    with pytest.raises(Invalid) as invalid:  # checked as a real create is
        actions.create("team", body("report-mars", region="mars"), ALICE, dry_run=True)
    assert invalid.value.causes[0].field == "spec.parameters.region"
    # The real create afterwards takes the name: the dry run did not.
    _, created = actions.create("team", body("report-now", region="us"), ALICE)
    assert created and count_runs(conn) == 1


def test_a_dry_run_delete_cancels_nothing(conn, actions):
    job = define(conn, "report", namespace="team", schedule=NEVER_DUE, now=T0)
    run = claimed_run(conn, job, T0)
    name = f"report-{run.id}"
    found = actions.cancel("team", name, ALICE, dry_run=True)
    assert found.run.id == run.id
    row = conn.execute(
        "SELECT status, cancel_requested FROM pgsched.job_runs WHERE id = %s", [run.id]
    ).fetchone()
    assert row == {"status": "RUNNING", "cancel_requested": False}
