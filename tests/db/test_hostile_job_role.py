"""A hostile job pod with the job role's real login: it can do its own run's work, and
nothing it sends — times, text, locks, functions planted in ``public`` — stops, slows or
impersonates the scheduler (I12; issue 25, findings 1, 2, 3, 5 and 8)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

from factories import RecordingLauncher, database_at, define, job_login, refused_to, runs_of
from pgsched.db import boundary, connection, migrate
from pgsched.db.session import Session
from pgsched.engine import dispatch, lease, pools, runs, settle
from pgsched.engine.tick import Ticker, TickSettings

FORGED = ["infinity", "-infinity", "1970-01-01 00:00:00+00", "2999-01-01 00:00:00+00"]

# What a job pod may execute: its run's lease functions (0003, 0006, 0021), and the
# previous release's signatures, kept for its pods running during an upgrade (0021).
INTENDED = {
    "pgsched.heartbeat(bigint,uuid)",
    "pgsched.lease_state(bigint,uuid)",
    "pgsched.listen_for_cancel(bigint,uuid)",
    "pgsched.workload_ended(bigint,uuid)",
    "pgsched.finish_run(bigint,uuid,text,text,text,integer,text)",
    "pgsched.heartbeat(bigint,uuid,timestamp with time zone)",
    "pgsched.workload_ended(bigint,uuid,timestamp with time zone)",
    "pgsched.finish_run(bigint,uuid,text,text,text,integer,text,timestamp with time zone)",
}


@pytest.fixture
def job(dsn, conn):
    user, job_dsn = job_login(conn, dsn)
    yield user, job_dsn
    conn.execute(f"DROP OWNED BY {user}")
    conn.execute(f"DROP ROLE {user}")


def start(conn, definition, token="mine"):
    runs.run_now(conn, definition.id, token=token)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition.id]).claimed
    return lease.Lease(run.id, run.lease_token)


def row(conn, run):
    return conn.execute(
        "SELECT *, now() AS db_now FROM pgsched.job_runs WHERE id = %s", [run.run_id]
    ).fetchone()


def within_the_database_clock(conn, value, *, slack=timedelta(minutes=1)):
    now = conn.execute("SELECT now() AS t").fetchone()["t"]
    return now - slack <= value <= now + slack


# -- forged times (finding 1) ------------------------------------------------------------------


@pytest.mark.parametrize("forged", FORGED)
def test_a_job_cannot_store_a_heartbeat_time_of_its_choosing(conn, job, forged):
    run = start(conn, define(conn))
    with connection.connect(job[1]) as pod:
        state = pod.execute(
            "SELECT pgsched.heartbeat(%s, %s, %s::timestamptz) AS s",
            [run.run_id, run.token, forged],
        ).fetchone()["s"]
        assert state == "active"
        assert pod.execute(
            "SELECT pgsched.workload_ended(%s, %s, %s::timestamptz) AS m",
            [run.run_id, run.token, forged],
        ).fetchone()["m"]
    stored = conn.execute(
        "SELECT isfinite(heartbeat_at) AND isfinite(workload_ended_at) AS finite,"
        " heartbeat_at, workload_ended_at FROM pgsched.job_runs WHERE id = %s",
        [run.run_id],
    ).fetchone()
    assert stored["finite"]
    assert within_the_database_clock(conn, stored["heartbeat_at"])
    assert within_the_database_clock(conn, stored["workload_ended_at"])


@pytest.mark.parametrize("forged", FORGED)
def test_a_forged_finish_time_is_not_stored_and_the_next_tick_still_dispatches(conn, job, forged):
    run = start(conn, define(conn, "forger"))
    with connection.connect(job[1]) as pod:
        assert pod.execute(
            "SELECT pgsched.finish_run(%s, %s, 'COMPLETED', NULL, NULL, 0, NULL,"
            " %s::timestamptz) AS f",
            [run.run_id, run.token, forged],
        ).fetchone()["f"]
    stored = conn.execute(
        "SELECT isfinite(finished_at) AS finite FROM pgsched.job_runs WHERE id = %s",
        [run.run_id],
    ).fetchone()
    assert stored["finite"]
    assert within_the_database_clock(conn, runs_of(conn, define(conn, "forger"))[0]["finished_at"])

    bystander = define(conn, "bystander")
    runs.run_now(conn, bystander.id, token="queued")
    settle.run_once(conn)
    claimed = dispatch.run_once(conn, RecordingLauncher()).claimed
    assert [claim.definition_id for claim in claimed] == [bystander.id]


def test_the_pinned_variants_are_the_owners_alone(conn, job):
    run = start(conn, define(conn))
    with connection.connect(job[1]) as pod:
        for statement in (
            "SELECT pgsched.heartbeat_pinned(%s, %s, 'infinity')",
            "SELECT pgsched.workload_ended_pinned(%s, %s, 'infinity')",
            "SELECT pgsched.finish_run_pinned(%s, %s, 'COMPLETED', NULL, NULL, 0, NULL,"
            " 'infinity')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                pod.execute(statement, [run.run_id, run.token])
    assert row(conn, run)["status"] == "RUNNING" and row(conn, run)["heartbeat_at"] is None


# -- unbounded text (finding 5) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"reason": "R" * (2 << 20)}, "is not a short identifier"),
        ({"reason": "Bad reason; DROP"}, "is not a short identifier"),
        ({"exit_code": 99_999}, "exit code 99999 is out of range 0..255"),
        ({"exit_code": -1}, "exit code -1 is out of range 0..255"),
        ({"retry_hint": "always"}, "is not retry or never"),
    ],
)
def test_a_job_cannot_finish_with_out_of_bounds_values_and_nothing_changes(
    conn, job, arguments, message
):
    run = start(conn, define(conn))
    with (
        connection.connect(job[1]) as pod,
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
    ):
        lease.finish(pod, run, "FAILED", **arguments)
    assert row(conn, run)["status"] == "RUNNING"


def test_a_jobs_error_text_is_cut_to_8_kib_with_a_marker(conn, job):
    run = start(conn, define(conn))
    with connection.connect(job[1]) as pod:
        assert lease.finish(pod, run, "FAILED", reason="NonZeroExit", error="é" * (1 << 20))
    stored = row(conn, run)["error"]
    assert len(stored.encode()) <= 8192
    assert stored.startswith("éé") and stored.endswith("[... truncated by pgsched to 8 KiB]")


# -- the job role's functions (finding 8) ------------------------------------------------------


def test_the_job_role_can_execute_exactly_the_intended_functions(conn, job):
    user = job[0]
    conn.execute("SET search_path = pg_catalog")  # regprocedure names every other schema
    executable = conn.execute(
        "SELECT p.oid::regprocedure::text AS signature FROM pg_proc AS p"
        " WHERE (p.pronamespace = 'pgsched'::regnamespace"
        "        OR p.proowner = (SELECT nspowner FROM pg_namespace WHERE nspname = 'pgsched')"
        "           AND p.pronamespace NOT IN ('pg_catalog'::regnamespace,"
        "                                      'information_schema'::regnamespace))"
        "   AND has_function_privilege(%s, p.oid, 'EXECUTE')",
        [user],
    ).fetchall()
    assert {found["signature"] for found in executable} == INTENDED


def test_a_job_cannot_name_or_listen_on_the_channel_that_wakes_the_ticks(conn, job):
    """A run's end wakes every replica's tick through a channel (migration 0035). Any role
    may NOTIFY a channel it can name: a job login that could name this one would keep every
    tick busy. The name comes from the lease key, which the job role cannot read."""
    refused_to(
        job[1],
        [
            "SELECT pgsched.dispatch_channel()",
            "SELECT pgsched.listen_for_dispatch()",
            "SELECT key FROM pgsched.lease_key",
        ],
    )


def test_a_function_the_owner_creates_later_is_nobodys_until_granted(conn, job):
    conn.execute("CREATE FUNCTION pgsched.added_later() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    with (
        connection.connect(job[1]) as pod,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        pod.execute("SELECT pgsched.added_later()")


# -- functions planted in public (finding 3) ---------------------------------------------------


def test_functions_planted_in_a_writable_public_never_run_as_the_owner(dsn, conn, job):
    conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # PostgreSQL 14's default
    with connection.connect(job[1]) as pod:
        pod.execute("CREATE TABLE public.planted_calls (who text, what text)")
        pod.execute("GRANT INSERT ON public.planted_calls TO PUBLIC")
        pod.execute(
            "CREATE FUNCTION public.hashtextextended(text, integer) RETURNS bigint"
            " LANGUAGE sql AS $$ INSERT INTO public.planted_calls"
            " VALUES (current_user, 'hashtextextended') RETURNING 0::bigint $$"
        )
        pod.execute(
            "CREATE FUNCTION public.make_interval(secs integer) RETURNS interval"
            " LANGUAGE sql AS $$ INSERT INTO public.planted_calls"
            " VALUES (current_user, 'make_interval') RETURNING interval '1 year' $$"
        )
    due = define(conn, "due")
    runs.run_now(conn, due.id, token="t")
    launcher = RecordingLauncher()
    ticked = Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick"),
        launcher,
        TickSettings(),
    )
    try:
        result = ticked.run_once()
    finally:
        ticked.close()
    assert result.leader and result.error is None
    assert [run.definition_id for run in launcher.launched] == [due.id]
    assert conn.execute("SELECT * FROM public.planted_calls").fetchall() == []


# -- locks (finding 2) -------------------------------------------------------------------------


def as_on_a_managed_service(admin):
    """Advisory locks for every login again, as where 0021 could not revoke them (no
    superuser: RDS, Cloud SQL, Azure)."""
    admin.execute(
        "DO $$ DECLARE f regprocedure; BEGIN"
        " FOR f IN SELECT oid::regprocedure FROM pg_proc"
        "  WHERE pronamespace = 'pg_catalog'::regnamespace AND proname LIKE 'pg\\_%advisory\\_%'"
        " LOOP EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f); END LOOP; END $$"
    )


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT pg_advisory_lock(hashtextextended('pgsched:tick-leader', 0))",
        "SELECT pg_try_advisory_lock(42)",
        "SELECT pg_advisory_lock_shared(1, 2)",
        "SELECT pg_try_advisory_xact_lock(hashtextextended('dispatch:' || gen_random_uuid(), 0))",
    ],
)
def test_a_job_cannot_take_any_advisory_lock_where_pgsched_could_revoke_them(conn, job, statement):
    with connection.connect(job[1]) as pod, pytest.raises(psycopg.errors.InsufficientPrivilege):
        pod.execute(statement)


def test_a_job_holding_the_leader_and_migrate_keys_cannot_keep_ticks_from_leading(dsn, conn, job):
    as_on_a_managed_service(conn)
    with connection.connect(job[1]) as pod:
        for name in ("pgsched:tick-leader", "pgsched:migrate"):
            pod.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
        due = define(conn, "due")
        runs.run_now(conn, due.id, token="t")
        launcher = RecordingLauncher()
        ticked = Ticker(lambda: connection.connect(dsn), launcher, TickSettings())
        try:
            results = [ticked.run_once() for _ in range(3)]
        finally:
            ticked.close()
    assert [result.leader for result in results] == [True, True, True]
    assert [run.definition_id for run in launcher.launched] == [due.id]


def test_a_job_holding_the_claim_keys_cannot_make_a_claim_or_a_settle_wait(conn, job):
    """Where any login may take advisory locks (a managed service), a job login holds the
    keys that claims and chaining took before migration 0027 (its definition's, its
    pool's, its downstream's chain) and cannot lock a row of the tables whose rows took
    their place: the claim of that definition in that pool, and the chain lock of that
    downstream, go ahead at once."""
    as_on_a_managed_service(conn)
    pools.upsert(conn, "default", "warehouse", 2)
    held = define(conn, "held", pool="warehouse")
    runs.run_now(conn, held.id, token="t")
    with connection.connect(job[1]) as pod:
        for key in (f"dispatch:{held.id}", "pool:default/warehouse", f"chain:{held.id}"):
            pod.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
        conn.execute("SET lock_timeout = '2s'")  # a wait for the pod fails, not hangs
        claimed = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[held.id]).claimed
        with conn.transaction():
            conn.execute("SELECT pgsched.lock_chains(%s::uuid[])", [[held.id]])
        for table in ("claim_locks", "job_definitions", "job_pools"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), pod.transaction():
                pod.execute(f"SELECT FROM pgsched.{table} FOR UPDATE")
    assert [run.definition_id for run in claimed] == [held.id]


def test_a_job_holding_any_advisory_key_cannot_hang_pgsched_migrate(postgres):
    dsn = database_at(postgres, "hostile_migrate", max(m.version for m in migrate.available()[:-1]))
    with connection.connect(dsn) as admin:
        as_on_a_managed_service(admin)
        user, job_dsn = job_login(admin, dsn)
        try:
            with connection.connect(job_dsn) as pod:
                for name in ("pgsched:migrate", "pgsched:tick-leader"):
                    pod.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
                with connection.connect(dsn) as migrating:
                    # An advisory wait is a lock wait: bounded, so old code fails, not hangs.
                    migrating.execute("SET lock_timeout = '5s'")
                    applied = migrate.migrate(migrating).applied
            assert applied == [migrate.latest_version()]
        finally:
            admin.execute(f"DROP OWNED BY {user}")
            admin.execute(f"DROP ROLE {user}")


# -- what doctor and the operator's start-up say -----------------------------------------------


def test_every_gap_in_the_boundary_is_named_with_its_fix(conn, job):
    user = job[0]
    assert boundary.problems(conn) == [
        f"job login(s) {user} lack a connection limit, statement_timeout or"
        " idle_in_transaction_session_timeout (settings of the pgsched_job group are not"
        f" inherited); fix: {boundary.LOGIN_LIMITS}"
    ]
    conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    as_on_a_managed_service(conn)
    found = boundary.problems(conn)
    assert [problem.split(":")[0] for problem in found] == [
        "schema public is writable by other roles (PostgreSQL 14's default)",
        "the job role may take advisory locks",
        f"job login(s) {user} lack a connection limit, statement_timeout or"
        " idle_in_transaction_session_timeout (settings of the pgsched_job group are not"
        " inherited); fix",
    ]


def test_a_job_login_with_its_limits_set_is_no_gap(conn, job):
    user = job[0]
    conn.execute(f"ALTER ROLE {user} CONNECTION LIMIT 5")
    conn.execute(f"ALTER ROLE {user} SET statement_timeout = '30s'")
    conn.execute(f"ALTER ROLE {user} SET idle_in_transaction_session_timeout = '30s'")
    assert boundary.problems(conn) == []


def test_limits_set_on_a_job_login_end_its_idle_transaction_and_its_long_statement(conn, job):
    """What holds: settings on the login (not on the pgsched_job group) bound its sessions."""
    user, job_dsn = job
    conn.execute(f"ALTER ROLE {user} SET statement_timeout = '1s'")
    conn.execute(f"ALTER ROLE {user} SET idle_in_transaction_session_timeout = '1s'")
    with connection.connect(job_dsn) as pod:
        with pytest.raises(psycopg.errors.QueryCanceled):
            pod.execute("SELECT pg_sleep(5)")
        pod.execute("BEGIN")
        time.sleep(2)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            pod.execute("SELECT 1")


def test_a_job_call_stuck_behind_a_lock_gives_up_within_seconds(conn, job):
    run = start(conn, define(conn))
    outcome: list[BaseException | str] = []
    with conn.transaction():
        conn.execute("SELECT 1 FROM pgsched.job_runs WHERE id = %s FOR UPDATE", [run.run_id])

        def beat() -> None:
            with connection.connect(job[1]) as pod:
                try:
                    outcome.append(lease.heartbeat(pod, run))
                except psycopg.Error as error:
                    outcome.append(error)

        beating = threading.Thread(target=beat)
        beating.start()
        beating.join(timeout=15)
        assert not beating.is_alive()
    assert isinstance(outcome[0], psycopg.errors.LockNotAvailable)


def test_every_kind_of_session_pgsched_opens_searches_pg_catalog_then_pgsched_only(dsn, job):
    """The operator's and CLI's connections, pool members (UI, watches) and the in-pod
    session of the heartbeat sidecar and SDK runner (as the job login)."""
    shown = "SELECT current_setting('search_path') AS path"
    with connection.connect(dsn) as direct:
        paths = [direct.execute(shown).fetchone()["path"]]
    with (
        connection.pool(dsn, name="pgsched-test-pool", max_size=1) as members,
        members.connection() as member,
    ):
        paths.append(member.execute(shown).fetchone()["path"])
    in_pod = Session.for_dsn(job[1], application_name="pgsched-heartbeat-1")
    try:
        paths.append(in_pod.run(lambda conn: conn.execute(shown).fetchone()["path"]))
    finally:
        in_pod.close()
    assert paths == ["pg_catalog, pgsched, pg_temp"] * 3
