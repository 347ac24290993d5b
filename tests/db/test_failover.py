"""Failovers with a real streaming standby: run ids, lost claims, and what doctor says
about replication.

A standby promoted before it received the primary's last commits hands out the same
sequence values again. pgsched places each WAL timeline's ids in a block of their own
(migration 0007), so the promoted server's ids can never name a run of the lost timeline.
A claim among those commits is recognised from its lease (migration 0032): the pod's next
call re-establishes it, or the launcher adopts its Job, and the run is not executed twice.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
import test_verdicts as verdicts_api

from cli_runner import pgsched
from factories import RecordingLauncher, define, job_login, refused_to
from invariants import launches_hold_their_claim, no_double_launch
from pgsched.db import connection
from pgsched.engine import dispatch, lease, runs, settle
from pgsched.engine.launcher import Adopted
from pgsched.engine.models import Definition, Run
from pgsched.engine.tick import Ticker, TickSettings
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.failover import revalidation
from plugins.postgres import migrated_server
from standby import promote, standby_of, wait_caught_up

BLOCK = 2**40


@pytest.fixture
def primary() -> Iterator:
    yield from migrated_server()


def run_now(dsn: str, tokens: list[str]) -> list[int]:
    with connection.connect(dsn) as conn:
        definition = define(conn, "ids", maxConcurrentRuns=1)
        return [runs.run_now(conn, definition.id, token=token).run.id for token in tokens]


def test_a_promoted_standby_never_reuses_the_run_ids_of_commits_it_lost(primary):
    standby = standby_of(primary)
    try:
        replicated = run_now(primary.dsn(), ["a", "b", "c"])
        assert replicated == [1, 2, 3]  # the first timeline keeps small ids
        wait_caught_up(primary, standby)

        standby.stop()  # from here on the standby misses everything: asynchronous loss
        lost = run_now(primary.dsn(), [f"lost-{n}" for n in range(50)])
        primary.stop(mode="immediate")

        standby.start()
        promote(standby)
        after = run_now(standby.dsn(), [f"after-{n}" for n in range(50)])

        assert not set(after) & set(lost), "an id of a lost run was handed out again"
        assert all(BLOCK <= run_id < 2 * BLOCK for run_id in after)
        with connection.connect(standby.dsn()) as conn:
            known = {row["id"] for row in conn.execute("SELECT id FROM pgsched.job_runs")}
        assert known == set(replicated) | set(after)
    finally:
        standby.cleanup()


class AdoptingLauncher(RecordingLauncher):
    """Finds the Job of each run's lost claim still there, as the API server keeps it, and
    adopts it the way the Kubernetes launcher does (``lease.adopt`` on a connection of its
    own); launches a run with no such Job."""

    def __init__(self, dsn: str, jobs: dict[int, lease.Lease]) -> None:
        super().__init__()
        self.dsn = dsn
        self.jobs = jobs

    def launch(self, run: Run, definition: Definition) -> str | Adopted | None:
        earlier = self.jobs.get(run.id)
        assert run.lease_token is not None
        if earlier is not None:
            with connection.connect(self.dsn) as conn:
                if lease.adopt(conn, lease.Lease(run.id, run.lease_token), earlier.token):
                    return Adopted(f"{definition.name}-{run.id}", earlier.token)
        return super().launch(run, definition)


def test_a_claim_lost_in_a_failover_is_taken_back_by_its_pod_or_its_job_never_run_twice(primary):
    """Three runs claimed and launched on the primary; the standby, stopped before, never
    received the claims. After the promotion: one pod's heartbeat re-establishes its claim,
    another pod's finish records its outcome, and the third run, claimed again by the
    dispatcher first, gets its Job adopted. No run is launched a second time."""
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            user, _ = job_login(conn, primary.dsn())
            jobs = [define(conn, name, maxConcurrentRuns=1) for name in ("beat", "end", "adopt")]
            for job in jobs:
                runs.run_now(conn, job.id, token="go")
        wait_caught_up(primary, standby)

        standby.stop()  # from here on the standby misses everything: the claims are lost
        first = RecordingLauncher()
        with connection.connect(primary.dsn()) as conn:
            dispatch.run_once(conn, first)
        held = {run.definition_id: lease.Lease(run.id, run.lease_token) for run in first.launched}
        beat, end, adopt = (held[job.id] for job in jobs)
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        with connection.connect(standby.dsn()) as conn:
            statuses = conn.execute("SELECT status, lease_token FROM pgsched.job_runs").fetchall()
            assert statuses == [{"status": "QUEUED", "lease_token": None}] * 3
            with connection.connect(standby.dsn(user=user)) as pod:
                assert lease.heartbeat(pod, beat) == "active"
                assert lease.finish(pod, end, "COMPLETED", exit_code=0)
            second = AdoptingLauncher(standby.dsn(), {adopt.run_id: adopt})
            result = dispatch.run_once(conn, second)
            assert [run.id for run in result.claimed] == [adopt.run_id]
            assert second.launched == []  # adopted, not launched again
            with connection.connect(standby.dsn(user=user)) as pod:
                assert lease.heartbeat(pod, adopt) == "active"
                assert lease.heartbeat(pod, beat) == "active"

            rows = {
                row["id"]: row for row in conn.execute("SELECT * FROM pgsched.job_runs").fetchall()
            }
            assert rows[beat.run_id]["status"] == "RUNNING"
            assert (rows[end.run_id]["status"], rows[end.run_id]["exit_code"]) == ("COMPLETED", 0)
            assert rows[adopt.run_id]["k8s_job_name"] == f"adopt-{adopt.run_id}"
            launches = [*first.launched, *second.launched]
            assert no_double_launch(run.id for run in launches) == []
            assert (
                launches_hold_their_claim(
                    conn,
                    [
                        (run.id, names.lease_fingerprint(str(run.lease_token)))
                        for run in first.launched
                        if run.id != end.run_id
                    ],
                )
                == []
            )
            # Nothing left to claim: no run is claimed a second time.
            assert dispatch.run_once(conn, RecordingLauncher()).claimed == []
    finally:
        standby.cleanup()


def replication_check(dsn: str) -> tuple[str, str]:
    result = pgsched("doctor", "-o", "json", dsn=dsn)
    [found] = [item for item in result.json()["checks"] if item["check"] == "replication"]
    return found["status"], found["detail"]


def test_doctor_warns_about_asynchronous_replication_with_the_settings_to_change(primary):
    standby = standby_of(primary)
    try:
        status, detail = replication_check(primary.dsn())
        assert status == "warn"
        assert "asynchronous replication to 1 standby(s)" in detail
        assert "acknowledged run-now requests, cancels and outcomes" in detail
        assert "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'" in detail

        with connection.connect(primary.dsn()) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'")
            conn.execute("SELECT pg_reload_conf()")
        # The test server runs with synchronous_commit = off: that defeats the standby.
        status, detail = replication_check(primary.dsn())
        assert status == "warn" and "do not wait for them" in detail
        assert "ALTER ROLE <pgsched role> SET synchronous_commit = on" in detail

        status, detail = replication_check(f"{primary.dsn()} options='-c synchronous_commit=on'")
        assert (status, detail.split(" (")[0]) == ("ok", "synchronous")
        assert "a failover loses nothing pgsched acknowledged" in detail

    finally:
        standby.cleanup()


def test_the_tick_leads_on_the_promoted_standby_soon_after_the_failover(primary):
    """Multi-host DSN (old primary first) with target_session_attrs=read-write: once the
    standby is promoted, the tick finds it, whatever state the old primary is in."""
    standby = standby_of(primary)
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres"
        " dbname=postgres target_session_attrs=read-write"
    )
    ticker = Ticker(lambda: connection.connect(dsn), RecordingLauncher(), TickSettings())
    try:
        assert ticker.run_once().leader
        primary.kill()
        killed = time.monotonic()
        promote(standby)
        while not ticker.run_once().leader:
            assert time.monotonic() - killed < 60, "no tick led on the promoted standby"
            time.sleep(0.1)
        seconds = time.monotonic() - killed
        print(f"\nfirst leading tick {seconds:.1f}s after the primary was killed")
        assert seconds < connection.CONNECT_TIMEOUT_SECONDS + 10
    finally:
        ticker.close()
        standby.cleanup()


def test_a_former_primary_still_writable_after_the_failover_is_refused_by_the_tick(primary):
    """Split brain: the standby was promoted while the old primary kept running. A replica
    that ticked on the new timeline never leads on the old one."""
    standby = standby_of(primary)
    servers = [standby]
    ticker = Ticker(
        lambda: connection.connect(servers[0].dsn()), RecordingLauncher(), TickSettings()
    )
    try:
        promote(standby)
        assert ticker.run_once().leader
        ticker.close()
        servers[0] = primary  # the DSN now resolves to the old primary, still writable
        result = ticker.run_once()
        assert not result.leader
        assert "is on WAL timeline 1, older than timeline 2" in (result.error or "")
        servers[0] = standby
        assert ticker.run_once().leader
    finally:
        ticker.close()
        standby.cleanup()


class ApiWithSecrets(verdicts_api.Api):
    """The verdicts' stand-in API (Jobs and pods by run id), and lease Secrets by name,
    read as the operator reads them (a merge patch that changes nothing)."""

    def __init__(self, jobs, pods=None, *, secrets=None):
        super().__init__(jobs, pods)
        self.secrets = secrets or {}

    def merge_patch(self, path, body):
        assert body == {}
        name = path.rsplit("/", 1)[1]
        if name not in self.secrets:
            raise api.ApiError("PATCH", path, 404, {"reason": "NotFound"})
        token = base64.b64encode(str(self.secrets[name]).encode()).decode()
        return {"data": {names.LEASE_SECRET_KEY: token}}


def job_of(name: str, run_id: int, token, *conditions: str) -> dict:
    """A Job of run ``run_id`` launched with lease ``token`` (finished per ``conditions``)."""
    metadata = {
        "namespace": "default",
        "labels": {names.LABEL_RUN_ID: str(run_id)},
        "annotations": {names.ANNOTATION_LEASE_SHA256: names.lease_fingerprint(str(token))},
    }
    return {**verdicts_api.job(*conditions), "metadata": metadata}


def test_after_a_failover_runs_whose_end_or_claim_was_lost_are_settled_from_their_jobs_once(
    primary,
):
    """On the primary, after the standby stopped receiving: run `ended` finished, run
    `cleaned` finished and its Job was cleaned up, run `claimed` was claimed and finished,
    run `running` was claimed and still runs, and a tenant made up a Job and Secret for run
    `forged`. After the promotion one pass compares them with their Jobs: `ended` and
    `claimed` COMPLETED, `cleaned` OutcomeUnknown (not retried), `running` RUNNING under its
    pod's lease, `forged` untouched; the pass is recorded, and no replica does it again."""
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            kinds = ("ended", "cleaned", "claimed", "running", "forged")
            jobs = {name: define(conn, name) for name in kinds}
            for job in jobs.values():
                runs.run_now(conn, job.id, token="go")
            started = dispatch.run_once(
                conn, RecordingLauncher(), definition_ids=[jobs["ended"].id, jobs["cleaned"].id]
            ).claimed
            ended, cleaned = sorted(started, key=lambda run: run.id)
        wait_caught_up(primary, standby)

        standby.stop()  # from here on the standby misses everything
        with connection.connect(primary.dsn()) as conn:
            for run in (ended, cleaned):
                assert lease.finish(conn, lease.Lease(run.id, run.lease_token), "COMPLETED")
            later = {
                run.definition_id: run
                for run in dispatch.run_once(conn, RecordingLauncher()).claimed
            }
        claimed, running, forged = (
            later[jobs[name].id] for name in ("claimed", "running", "forged")
        )
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        made_up = uuid.UUID(bytes=forged.lease_token.bytes[:8] + bytes(8))
        cluster = ApiWithSecrets(
            {
                f"ended-{ended.id}": job_of("ended", ended.id, ended.lease_token, "Complete"),
                f"claimed-{claimed.id}": job_of(
                    "claimed", claimed.id, claimed.lease_token, "Complete"
                ),
                f"running-{running.id}": job_of("running", running.id, running.lease_token),
                f"forged-{forged.id}": job_of("forged", forged.id, made_up, "Complete"),
            },
            secrets={
                names.lease_secret_name(f"claimed-{claimed.id}"): claimed.lease_token,
                names.lease_secret_name(f"running-{running.id}"): running.lease_token,
                names.lease_secret_name(f"forged-{forged.id}"): made_up,
            },
        )
        with connection.connect(standby.dsn()) as conn:
            before = {
                row["id"]: row["status"] for row in conn.execute("SELECT * FROM pgsched.job_runs")
            }
            assert before == {
                ended.id: "RUNNING",
                cleaned.id: "RUNNING",
                claimed.id: "QUEUED",
                running.id: "QUEUED",
                forged.id: "QUEUED",
            }
            after_failover = runs.run_now(conn, jobs["ended"].id, token="after").run
            assert after_failover.id > BLOCK  # a run of the new timeline: not compared

            result = revalidation.run_once(conn, cluster)

            assert result.timeline == 2 and result.finished
            assert result.compared == 5
            assert result.recorded == {
                ended.id: "COMPLETED",
                cleaned.id: "OutcomeUnknown",  # its Job gone: not JobDeleted, not retried
                claimed.id: "COMPLETED",
            }
            assert sorted(result.reestablished) == sorted([claimed.id, running.id])
            rows = {row["id"]: row for row in conn.execute("SELECT * FROM pgsched.job_runs")}
            assert rows[ended.id]["status"] == "COMPLETED"
            assert rows[claimed.id]["status"] == "COMPLETED"
            assert (rows[running.id]["status"], rows[running.id]["lease_token"]) == (
                "RUNNING",
                running.lease_token,
            )
            assert rows[running.id]["k8s_job_name"] == f"running-{running.id}"
            assert (rows[forged.id]["status"], rows[forged.id]["lease_token"]) == ("QUEUED", None)
            # Recorded: neither this replica nor another compares again on this timeline.
            assert revalidation.run_once(conn, cluster).timeline is None
            with connection.connect(standby.dsn()) as other:
                assert revalidation.run_once(other, cluster).timeline is None
            assert settle.run_once(conn).retried == []
            # Nothing is launched again: the dispatcher claims only the forged run's.
            launched = dispatch.run_once(conn, RecordingLauncher()).claimed
            assert sorted(run.id for run in launched) == sorted([forged.id, after_failover.id])
    finally:
        standby.cleanup()


def test_a_pass_is_owed_only_on_a_timeline_no_pass_was_recorded_for(dsn, conn):
    """The migration recorded the timeline it ran on: no pass there. The job login can
    neither read nor write the record, nor re-establish a claim (the owner's alone)."""
    assert revalidation.run_once(conn, ApiWithSecrets({})).timeline is None
    user, job_dsn = job_login(conn, dsn)
    try:
        refused_to(
            job_dsn,
            [
                "SELECT * FROM pgsched.timeline_revalidations",
                "DELETE FROM pgsched.timeline_revalidations",
                "SELECT pgsched.reestablish_claim(1, gen_random_uuid())",
            ],
        )
    finally:  # roles are the whole server's: a login left behind is another test's gap
        conn.execute(f"DROP OWNED BY {user}")
        conn.execute(f"DROP ROLE {user}")


def test_a_lost_end_frees_its_slot_before_a_lost_claim_of_the_same_job_is_taken_back(primary):
    """maxConcurrentRuns 1: `later` (the higher id, due first) ran and ended, then `earlier`
    was claimed and ended, all after the standby stopped receiving. On the new primary
    `later` is RUNNING and holds the only slot that `earlier`, QUEUED, needs: the pass
    records the end before it takes the claim back, whatever their ids' order."""
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            job = define(conn, "one", maxConcurrentRuns=1)
            due = conn.execute("SELECT now() - interval '1 minute' AS t").fetchone()["t"]
            earlier = runs.run_now(conn, job.id, token="earlier", scheduled_for=due).run
            later = runs.run_now(
                conn, job.id, token="later", scheduled_for=due - timedelta(minutes=1)
            ).run
            [first] = dispatch.run_once(conn, RecordingLauncher()).claimed
            assert first.id == later.id > earlier.id
        wait_caught_up(primary, standby)

        standby.stop()  # from here on the standby misses everything
        with connection.connect(primary.dsn()) as conn:
            assert lease.finish(conn, lease.Lease(first.id, first.lease_token), "COMPLETED")
            [second] = dispatch.run_once(conn, RecordingLauncher()).claimed
            assert lease.finish(conn, lease.Lease(second.id, second.lease_token), "COMPLETED")
        primary.stop(mode="immediate")
        standby.start()
        promote(standby)

        name_first, name_second = f"one-{first.id}", f"one-{second.id}"
        cluster = ApiWithSecrets(
            {
                name_first: job_of("one", first.id, first.lease_token, "Complete"),
                name_second: job_of("one", second.id, second.lease_token, "Complete"),
            },
            secrets={names.lease_secret_name(name_second): second.lease_token},
        )
        with connection.connect(standby.dsn()) as conn:
            result = revalidation.run_once(conn, cluster)
            assert result.recorded == {later.id: "COMPLETED", earlier.id: "COMPLETED"}
            assert dispatch.run_once(conn, RecordingLauncher()).claimed == []
    finally:
        standby.cleanup()


@pytest.fixture
def promoted_with_a_run(primary) -> Iterator[tuple]:
    """A run claimed on the primary (job ``waiting``), the standby caught up with it, then
    the primary stopped and the standby promoted: (the new primary, the run)."""
    standby = standby_of(primary)
    try:
        with connection.connect(primary.dsn()) as conn:
            job = define(conn, "waiting")
            runs.run_now(conn, job.id, token="go")
            [run] = dispatch.run_once(conn, RecordingLauncher()).claimed
        wait_caught_up(primary, standby)
        primary.stop(mode="immediate")
        promote(standby)
        yield standby, run
    finally:
        standby.cleanup()


def test_a_pass_the_api_server_interrupts_is_released_and_done_when_it_answers(
    promoted_with_a_run,
):
    """The API server away fails the round and releases the pass at once, not after its
    hold: the next round, with the API back, does it and records it."""
    standby, run = promoted_with_a_run
    with connection.connect(standby.dsn()) as conn:
        with pytest.raises(api.ApiError):
            revalidation.run_once(conn, verdicts_api.Api(down=True))
        [record] = conn.execute(
            "SELECT * FROM pgsched.timeline_revalidations WHERE timeline = 2"
        ).fetchall()
        assert (record["claimed_until"], record["after_id"], record["finished_at"]) == (
            None,
            0,
            None,
        )
        finished = job_of("waiting", run.id, run.lease_token, "Complete")
        result = revalidation.run_once(conn, ApiWithSecrets({f"waiting-{run.id}": finished}))
        assert result.finished and result.recorded == {run.id: "COMPLETED"}
        assert revalidation.run_once(conn, ApiWithSecrets({})).timeline is None


def test_a_pass_whose_round_lost_its_session_is_taken_again_at_once_by_its_replica(
    promoted_with_a_run,
):
    """A round that loses its database session after taking the pass (the new primary
    restarting under it, as it may right after a promotion) cannot release it. Another
    replica waits for the hold to run out; the same replica's next round releases its own
    hold and does the pass at once, instead of a minute later (seen under load in CI: the
    lost runs were restored 60 s after the promotion, with dispatch waiting on the pass)."""
    standby, run = promoted_with_a_run
    finished = {f"waiting-{run.id}": job_of("waiting", run.id, run.lease_token, "Complete")}
    hold = revalidation.Hold()
    with connection.connect(standby.dsn()) as admin, connection.connect(standby.dsn()) as lost:
        backend = lost.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
        cutting = ApiWithSecrets(finished)
        # Its session ends while it asks the API server for the pass's Jobs.
        cutting.on_get = lambda: admin.execute("SELECT pg_terminate_backend(%s)", [backend])
        with pytest.raises(psycopg.OperationalError):
            revalidation.run_once(lost, cutting, hold=hold)
    with connection.connect(standby.dsn()) as conn:
        [record] = conn.execute(
            "SELECT * FROM pgsched.timeline_revalidations WHERE timeline = 2"
        ).fetchall()
        assert record["claimed_until"] is not None and record["finished_at"] is None
        assert revalidation.run_once(conn, ApiWithSecrets(finished)).timeline is None, (
            "another replica waits for the hold"
        )
        result = revalidation.run_once(conn, ApiWithSecrets(finished), hold=hold)
        assert result.finished and result.recorded == {run.id: "COMPLETED"}
