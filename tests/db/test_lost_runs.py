"""A run whose row an asynchronous failover lost entirely is restored under its old id
(migration 0034), and the new primary's duplicate of it never runs.

A real streaming standby stops receiving; on the primary a scheduled occurrence and a
run-now run are created and claimed; the primary dies and the standby is promoted. The new
primary has no row for either, queues both again (the materializer, a run-now request
carried out again), and ``pgsched.restore_lost_run`` — given what their Jobs carry and the
leases their pods hold — brings the old rows back RUNNING and skips the duplicates. A
made-up lease restores nothing, and the job role cannot call the function at all. The
whole path through the operator, its Jobs and the API server is in
tests/cluster/test_failover_lost_runs.py.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import test_verdicts as verdicts_api

from factories import RecordingLauncher, define
from k8sfixtures import job_settings
from pgsched.db import connection, queries
from pgsched.engine import definitions, dispatch, materialize, runs
from pgsched.engine.models import Run
from pgsched.engine.tick import Ticker, TickSettings
from pgsched.k8s import names
from pgsched.k8s.failover import restoration, revalidation
from pgsched.k8s.jobside import jobs
from plugins.postgres import migrated_server
from standby import promote, standby_of, wait_caught_up

# Occurrences a few minutes ago: due on the database clock, as run-now runs are.
T0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
DUE = T0 + timedelta(minutes=1)


@pytest.fixture
def primary() -> Iterator:
    yield from migrated_server()


def restore(conn, run: Run, lease, *, namespace: str = "default", **changes) -> dict:
    facts = {
        "run_id": run.id,
        "lease": lease,
        "namespace": namespace,
        "job_name": f"job-{run.id}",
        "definition_id": run.definition_id,
        "trigger": run.trigger,
        "scheduled_for": run.scheduled_for,
        "attempt": run.attempt,
        "retry_of": run.retry_of,
        "upstream_run_id": run.upstream_run_id,
        "request_token": run.request_token,
        "parameters": None,
        **changes,
    }
    found = conn.execute(queries.get("restore_lost_run"), facts).fetchone()
    assert found is not None
    return dict(found)


def rows(conn) -> dict[int, dict]:
    return {row["id"]: row for row in conn.execute("SELECT * FROM pgsched.job_runs ORDER BY id")}


def test_runs_lost_with_their_rows_are_restored_under_their_ids_and_their_duplicates_skipped(
    primary,
):
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            scheduled = define(conn, "scheduled", schedule="* * * * *", now=T0)
            manual = define(conn, "manual", schedule="0 0 1 1 *", now=T0, maxConcurrentRuns=2)
        wait_caught_up(primary, standby)

        standby.stop()  # from here on the standby misses everything
        with connection.connect(primary.dsn()) as conn:
            assert materialize.run_once(conn, now=DUE).queued == 1
            runs.run_now(conn, manual.id, token="once")
            claimed = dispatch.run_once(conn, RecordingLauncher()).claimed
        lost = {run.definition_id: run for run in claimed}
        occurrence, requested = lost[scheduled.id], lost[manual.id]
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        with connection.connect(standby.dsn()) as conn:
            assert rows(conn) == {}
            # The new primary does the same work again: the occurrence (next_run_at was
            # rolled back) and the run-now request (kept on its ScheduledJob, re-done).
            assert materialize.run_once(conn, now=DUE).queued == 1
            again = runs.run_now(conn, manual.id, token="once").run
            [duplicate] = [row for row in rows(conn).values() if row["trigger"] == "schedule"]

            # A lease the database never issued for the run restores nothing.
            made_up = uuid.UUID(bytes=occurrence.lease_token.bytes[:8] + bytes(8))
            assert restore(conn, occurrence, made_up)["outcome"] == "forged"
            assert restore(conn, requested, occurrence.lease_token)["outcome"] == "forged"
            # Nor does a genuine one filed under another namespace's definition.
            other = restore(conn, occurrence, occurrence.lease_token, namespace="elsewhere")
            assert other["outcome"] == "no_definition"
            assert set(rows(conn)) == {duplicate["id"], again.id}

            assert restore(conn, occurrence, occurrence.lease_token) == {
                "outcome": "restored",
                "duplicate_id": duplicate["id"],
                "duplicate_status": "QUEUED",
            }
            assert restore(conn, requested, requested.lease_token)["duplicate_id"] == again.id
            assert restore(conn, requested, requested.lease_token)["outcome"] == "exists"

            after = rows(conn)
            for run in (occurrence, requested):
                row = after[run.id]
                assert (row["status"], row["lease_token"], row["trigger"], row["attempt"]) == (
                    "RUNNING",
                    run.lease_token,
                    run.trigger,
                    1,
                )
                assert row["scheduled_for"] == run.scheduled_for
                assert row["k8s_job_name"] == f"job-{run.id}"
            assert after[requested.id]["request_token"] == "once"
            for skipped in (duplicate["id"], again.id):
                assert (after[skipped]["status"], after[skipped]["reason"]) == (
                    "SKIPPED",
                    "DuplicateOfRestoredRun",
                )
                assert after[skipped]["started_at"] is None
            assert f"run {occurrence.id} " in after[duplicate["id"]]["error"]
            # Nothing is left to claim, and the occurrence is not materialized a third time.
            assert dispatch.run_once(conn, RecordingLauncher()).claimed == []
            assert materialize.run_once(conn, now=DUE).queued == 0
            # A run the new primary created (and claimed) itself is not a lost one.
            runs.run_now(conn, manual.id, token="fresh")
            [fresh] = dispatch.run_once(conn, RecordingLauncher()).claimed
            assert restore(conn, fresh, fresh.lease_token)["outcome"] == "current"
    finally:
        standby.cleanup()


def test_a_duplicate_claimed_before_the_restore_is_reported_and_nothing_restored(primary):
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            manual = define(conn, "manual", schedule="0 0 1 1 *", now=T0)
        wait_caught_up(primary, standby)
        standby.stop()
        with connection.connect(primary.dsn()) as conn:
            runs.run_now(conn, manual.id, token="once")
            [lost] = dispatch.run_once(conn, RecordingLauncher()).claimed
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)
        with connection.connect(standby.dsn()) as conn:
            runs.run_now(conn, manual.id, token="once")
            [ran] = dispatch.run_once(conn, RecordingLauncher()).claimed
            assert restore(conn, lost, lost.lease_token) == {
                "outcome": "duplicate_ran",
                "duplicate_id": ran.id,
                "duplicate_status": "RUNNING",
            }
            assert set(rows(conn)) == {ran.id}
    finally:
        standby.cleanup()


def test_the_job_role_cannot_restore_a_run(conn, job_dsn):
    with connection.connect(job_dsn) as pod, pytest.raises(psycopg.errors.InsufficientPrivilege):
        pod.execute(
            "SELECT * FROM pgsched.restore_lost_run(1, gen_random_uuid(), 'default', 'x',"
            " gen_random_uuid(), 'manual', now(), 1, NULL, NULL, 'token')"
        )


def test_after_a_failover_the_tick_claims_nothing_until_the_timelines_pass_has_finished(primary):
    """The duplicate of a lost run must still be unclaimed when the pass restores the run:
    the Kubernetes operator's tick (failover_pass_wait_seconds set) does not claim on a
    new timeline before its pass has finished, for at most that bound."""
    standby = standby_of(primary)
    held = RecordingLauncher()
    waiting = Ticker(
        lambda: connection.connect(standby.dsn()),
        held,
        TickSettings(failover_pass_wait_seconds=300),
    )
    bounded = Ticker(
        lambda: connection.connect(standby.dsn()),
        RecordingLauncher(),
        TickSettings(failover_pass_wait_seconds=0.5),
    )
    try:
        with connection.connect(primary.dsn()) as conn:
            manual = define(conn, "manual", schedule="0 0 1 1 *", now=T0, maxConcurrentRuns=5)
        wait_caught_up(primary, standby)
        primary.stop(mode="immediate")
        promote(standby)
        with connection.connect(standby.dsn()) as conn:
            first = runs.run_now(conn, manual.id, token="first").run
            result = waiting.run_once()
            assert result.leader and result.dispatched is None and held.launched == []
            assert result.dispatch_held  # what pgsched_dispatch_held_for_failover_pass shows

            # The bound: a tick that has waited long enough claims anyway (and says so).
            assert bounded.run_once().dispatched is None
            time.sleep(0.6)
            assert [run.id for run in bounded.run_once().dispatched.claimed] == [first.id]

            # The pass finishes (nothing was lost here): the waiting tick claims at once.
            second = runs.run_now(conn, manual.id, token="second").run
            assert waiting.run_once().dispatched is None
            assert revalidation.run_once(conn, verdicts_api.Api({})).finished
            claimed = waiting.run_once()
            assert [run.id for run in claimed.dispatched.claimed] == [second.id]
            assert not claimed.dispatch_held
    finally:
        waiting.close()
        bounded.close()
        standby.cleanup()


SETTINGS = job_settings()


class JobsAndLeases:
    """The API server as restoration reads it: the operator's Jobs, listed by their run-id
    label, and each one's lease Secret (answered to the empty merge patch it sends)."""

    def __init__(self, jobs: list[dict], leases: dict[str, uuid.UUID]):
        self.jobs, self.leases = jobs, leases

    def get(self, path, **params):
        assert path.endswith("/jobs") and params["labelSelector"] == names.LABEL_RUN_ID
        return {"items": [job for job in self.jobs if f"/{job['metadata']['namespace']}/" in path]}

    def merge_patch(self, path, patch):
        assert patch == {} and "/secrets/" in path
        name = path.rsplit("/", 1)[1]
        token = str(self.leases[name]).encode()
        return {"data": {names.LEASE_SECRET_KEY: base64.b64encode(token).decode()}}


def test_a_restored_run_keeps_the_parameters_it_was_given_unless_its_job_was_edited_past_them(
    primary, caplog
):
    """A run-now's parameters live beside its row (pgsched.run_parameters) and its retries
    copy them: a run restored without them would be retried with the defaults. The Job
    carries them; an edit of the Job that the declarations refuse restores none."""
    declared = [{"name": "region", "default": "eu", "pattern": "[a-z]{2}"}]
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            job = define(
                conn,
                "manual",
                schedule="0 0 1 1 *",
                now=T0,
                maxConcurrentRuns=2,
                parameters=declared,
            )
        wait_caught_up(primary, standby)
        standby.stop()
        with connection.connect(primary.dsn()) as conn:
            for token in ("honest", "edited"):
                runs.run_now(conn, job.id, token=token, parameters={"region": "us"})
            claimed = dispatch.run_once(conn, RecordingLauncher()).claimed
            definition = definitions.get(conn, job.id)
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        lost = {run.request_token: run for run in claimed}
        assert all(run.parameters == {"region": "us"} for run in lost.values())
        built = {token: jobs.build(definition, run, SETTINGS) for token, run in lost.items()}
        built["edited"]["metadata"]["annotations"][names.ANNOTATION_PARAMETERS] = (
            '{"region": "US-EAST"}'
        )
        kube = JobsAndLeases(
            list(built.values()),
            {
                names.lease_secret_name(built[token]["metadata"]["name"]): run.lease_token
                for token, run in lost.items()
            },
        )
        with connection.connect(standby.dsn()) as conn:
            done = restoration.run_once(conn, kube, last_id=max(run.id for run in claimed))
            assert [item.outcome for item in done] == ["restored", "restored"]
            assert runs.get(conn, lost["honest"].id).parameters == {"region": "us"}
            assert runs.get(conn, lost["edited"].id).parameters is None
    finally:
        standby.cleanup()
    [warning] = [r.getMessage() for r in caplog.records if "parameters" in r.getMessage()]
    assert "its parameters are not restored with its run (region:" in warning
