"""``pgsched doctor`` and the start-up preflight, against the real database and PgBouncer.

The pooler tests run a real PgBouncer (Debian's ``pgbouncer`` package) in front of the test
server: in transaction (and statement) pooling mode, session advisory locks — leader
election — cannot work, and both the operator's preflight and ``doctor`` must say so.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli_runner import pgsched
from devenv.processes import free_port
from devenv.waiting import wait_for
from factories import RecordingLauncher, define
from pgsched.db import connection, preflight
from pgsched.engine import definitions, dispatch, leader, runs

LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


def checks(result):
    return {item["check"]: (item["status"], item["detail"]) for item in result.json()["checks"]}


def tick_once(dsn, *, lead=True):
    """What an operator replica's tick session leaves behind: led, or found the lock taken."""
    session = connection.connect(dsn, application_name="pgsched-tick")
    if lead:
        assert leader.try_lead(session)
        leader.stop_leading(session)
    else:
        assert not leader.try_lead(session)
    return session


def test_doctor_on_a_healthy_installation_reports_ok_and_exits_0(dsn, conn):
    define(conn, "report", schedule="0 8 * * *")
    with tick_once(dsn):
        result = pgsched("doctor", "-o", "json", dsn=dsn)
    assert result.code == 0, result.out + result.err
    found = checks(result)
    assert {name: status for name, (status, _) in found.items()} == {
        "database": "ok",
        "server version": "ok",
        "schema": "ok",
        "session": "ok",
        "clock": "ok",
        "replication": "ok",
        "leader": "ok",
        "tenant boundary": "ok",
        "running runs": "ok",
        "queued runs": "ok",
        "materialization": "ok",
        "publisher": "ok",
        "auto-suspended": "ok",
        "notifications": "ok",
        "not ready": "ok",
        "kubernetes": "skip",
    }
    assert (
        "led the latest tick" in found["leader"][1] and "1 replica connected" in found["leader"][1]
    )
    assert "no streaming standby connected" in found["replication"][1]


def test_doctor_fails_when_no_operator_is_connected(dsn, conn):
    result = pgsched("doctor", dsn=dsn)
    assert result.code == 1
    assert "no operator replica is connected" in result.out


def test_doctor_names_a_foreign_session_that_holds_the_leader_lock(dsn, conn):
    with connection.connect(dsn, application_name="psql") as squatter:
        assert leader.try_lead(squatter)
        with tick_once(dsn, lead=False):
            status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["leader"]
    assert status == "warn"
    assert "holds the leader lock now" in detail and "'psql', not an operator tick" in detail


def test_doctor_finds_stuck_runs_and_unmaterialized_occurrences(dsn, conn):
    stuck = define(conn, "stuck", maxConcurrentRuns=1, now=LONG_AGO)  # due since 2026-01-01
    runs.run_now(conn, stuck.id, token="a", scheduled_for=LONG_AGO)
    [orphan] = dispatch.run_once(conn, RecordingLauncher(), now=LONG_AGO).claimed  # never beats
    waiting = define(conn, "waiting", schedule="0 8 * * *", maxConcurrentRuns=2)
    queued_an_hour_ago(conn, waiting, "b")

    with tick_once(dsn):
        result = pgsched("doctor", "-o", "json", dsn=dsn)

    assert result.code == 1
    found = checks(result)
    assert found["running runs"][0] == "FAIL"
    assert f"run {orphan.id} default/stuck (never heartbeated)" in found["running runs"][1]
    assert found["queued runs"][0] == "FAIL" and "default/waiting" in found["queued runs"][1]
    assert found["materialization"][0] == "FAIL" and "default/stuck" in found["materialization"][1]


def queued_an_hour_ago(conn, job, token):
    """A run of ``job`` due an hour ago and queued then (as the tick would have)."""
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    queued = runs.run_now(conn, job.id, token=token, scheduled_for=an_hour_ago).run
    conn.execute(
        "UPDATE pgsched.job_runs SET created_at = %s WHERE id = %s", [an_hour_ago, queued.id]
    )


def test_a_run_asked_for_a_past_instant_is_not_overdue_the_moment_it_is_queued(dsn, conn):
    job = define(conn, "backfilled", schedule="0 8 * * *", maxConcurrentRuns=2)
    last_week = datetime.now(UTC) - timedelta(days=7)
    runs.run_now(conn, job.id, token="last-week", scheduled_for=last_week)
    with tick_once(dsn):
        status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["queued runs"]
    assert status == "ok", detail
    conn.execute("UPDATE pgsched.job_runs SET created_at = now() - interval '10 minutes'")
    with tick_once(dsn):
        status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["queued runs"]
    assert status == "FAIL" and "default/backfilled (waiting since" in detail, detail


def test_doctor_tells_waiting_at_the_cap_from_stuck(dsn, conn):
    job = define(conn, "busy", schedule="0 8 * * *", maxConcurrentRuns=1)
    for token in "ab":
        queued_an_hour_ago(conn, job, token)
    [running] = dispatch.run_once(conn, RecordingLauncher()).claimed
    conn.execute("UPDATE pgsched.job_runs SET heartbeat_at = now() WHERE id = %s", [running.id])
    with tick_once(dsn):
        status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["queued runs"]
    assert status == "warn" and "waiting for a slot at maxConcurrentRuns" in detail


def test_doctor_lists_auto_suspended_jobs_with_the_fix(dsn, conn):
    job = define(conn, "flaky", schedule="0 8 * * *")
    conn.execute(
        "UPDATE pgsched.job_definitions SET auto_suspended_at = now(),"
        " auto_suspend_reason = '3 consecutive runs failed' WHERE id = %s",
        [job.id],
    )
    with tick_once(dsn):
        status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["auto-suspended"]
    assert status == "warn"
    assert "default/flaky: 3 consecutive runs failed" in detail and "pgsched resume" in detail


def test_doctor_lists_dead_lettered_notifications_with_their_error(dsn, conn):
    job = define(
        conn,
        "nightly",
        schedule="0 8 * * *",
        # Skips go only to a target that lists them (docs/notifications.md).
        notify={
            "targets": [
                {
                    "name": "chat",
                    "type": "Slack",
                    "url": "http://127.0.0.1:9/",
                    "events": ["skipped"],
                }
            ]
        },
    )
    runs.run_now(conn, job.id, token="t")
    conn.execute("UPDATE pgsched.job_runs SET status = 'SKIPPED', reason = 'Suspended'")
    conn.execute(
        "UPDATE pgsched.notifications SET state = 'DEAD', attempts = 10,"
        " last_error = '127.0.0.1:9 answered 500: oops', finished_at = now()"
    )
    with tick_once(dsn):
        status, detail = checks(pgsched("doctor", "-o", "json", dsn=dsn))["notifications"]
    assert status == "warn"
    assert "1 notifications were not delivered" in detail
    assert "default/nightly run" in detail and "skipped to chat after 10 attempts" in detail
    assert "answered 500: oops" in detail


def test_doctor_lists_scheduled_jobs_whose_spec_was_rejected(dsn, conn):
    job = define(conn, "typo", schedule="0 8 * * *")
    key = definitions.DefinitionKey(
        id=job.id, namespace="default", name="typo", generation=2, created_at=job.created_at
    )
    definitions.reject(conn, key, "schedule: minute 61 is out of range 0..59")
    with tick_once(dsn):
        result = pgsched("doctor", "-o", "json", dsn=dsn)
    status, detail = checks(result)["not ready"]
    assert result.code == 0 and status == "warn"
    assert "1 ScheduledJob(s) Ready=False (default/typo: schedule: minute 61" in detail


def test_doctor_reports_an_unreachable_database_and_exits_1():
    result = pgsched(
        "doctor", "--dsn", f"host=127.0.0.1 port={free_port()} user=x connect_timeout=2"
    )
    assert result.code == 1
    assert "database" in result.out and "cannot connect" in result.out


# -- poolers ---------------------------------------------------------------------------------


def _pgbouncer(postgres, mode: str) -> Iterator[str]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        # `make test` installs it (hack/debian-deps.sh --test) and sets PGSCHED_REQUIRE_CLUSTER: there a
        # missing pooler is an error, not a reason to test less.
        missing = (
            "PgBouncer is not installed (hack/debian-deps.sh --test, or apt-get install pgbouncer)"
        )
        if os.environ.get("PGSCHED_REQUIRE_CLUSTER"):
            pytest.fail(missing)
        pytest.skip(missing)
    # Not pytest's tmp_path: when we are root, PgBouncer runs as postgres and must reach it.
    work = Path(tempfile.mkdtemp(prefix=f"pgsched-pgbouncer-{mode}-"))
    port = free_port()
    (work / "users.txt").write_text('"postgres" ""\n')
    (work / "pgbouncer.ini").write_text(
        f"[databases]\n* = host=127.0.0.1 port={postgres.port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {work}/users.txt\npool_mode = {mode}\n"
        "default_pool_size = 5\nignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {work}/pgbouncer.log\n"
    )
    command = [binary, str(work / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chown(work, user.pw_uid, user.pw_gid)
        command = ["runuser", "-u", "postgres", "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(
            lambda: "listening on" in _read(work / "pgbouncer.log") or process.poll() is not None,
            10,
            describe="PgBouncer to listen",
        )
        assert process.poll() is None, _read(work / "pgbouncer.log")
        yield f"host=127.0.0.1 port={port} user=postgres dbname={{dbname}}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(params=["transaction", "statement"])
def pooled_dsn(request, postgres, dsn) -> Iterator[str]:
    """The test database behind PgBouncer in a pooling mode that breaks sessions."""
    dbname = dict(part.split("=") for part in dsn.split())["dbname"]
    for template in _pgbouncer(postgres, request.param):
        yield template.format(dbname=dbname)


@pytest.fixture
def session_pooled_dsn(postgres, dsn) -> Iterator[str]:
    dbname = dict(part.split("=") for part in dsn.split())["dbname"]
    for template in _pgbouncer(postgres, "session"):
        yield template.format(dbname=dbname)


def _preflight(dsn: str) -> dict[str, preflight.Check]:
    def connect():
        return connection.connect(dsn, prepare_threshold=None)

    with connect() as conn:
        return {check.name: check for check in preflight.run(conn, connect=connect)}


def test_preflight_detects_a_pooler_that_breaks_sessions(pooled_dsn):
    session = _preflight(pooled_dsn)["session"]
    assert not session.ok
    assert "session advisory locks (leader election) cannot work" in session.detail
    assert "PgBouncer pool_mode = session" in session.detail


def test_preflight_accepts_session_pooling_and_direct_connections(session_pooled_dsn, dsn):
    assert _preflight(session_pooled_dsn)["session"].ok
    assert _preflight(dsn)["session"].ok


def test_the_operator_refuses_to_start_behind_a_transaction_pooler(pooled_dsn, run_api_tls):
    environment = {
        **os.environ,
        "PGSCHED_DSN": pooled_dsn,
        "PGSCHED_NAMESPACES": "default",
        "PGSCHED_IMAGE": "pgsched:test",
        "PGSCHED_RUN_API_CERT_DIR": str(run_api_tls),
        "PGSCHED_RUN_API_URL": "https://127.0.0.1:8443",
        "KUBECONFIG": "/nonexistent",  # it must stop before it ever talks to Kubernetes
    }
    result = subprocess.run(
        [sys.executable, "-m", "pgsched.cli.main", "operator"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "pgsched operator: cannot start: session:" in result.stderr
    assert "connect pgsched directly to PostgreSQL" in result.stderr


def test_doctor_explains_a_transaction_pooler(pooled_dsn):
    result = pgsched("doctor", "-o", "json", dsn=pooled_dsn)
    assert result.code == 1
    status, detail = checks(result)["session"]
    assert status == "FAIL" and "pool_mode = session" in detail


def test_doctor_reads_the_connection_string_from_the_file_the_chart_mounts(dsn, tmp_path):
    """In an operator pod the DSN is a mounted file (PGSCHED_DSN_FILE), not a variable:
    `kubectl exec … pgsched doctor` must find it there as the operator does."""
    path = tmp_path / "dsn"
    path.write_text(dsn + "\n")
    result = pgsched("doctor", "-o", "json", env={"PGSCHED_DSN_FILE": str(path)})
    assert checks(result)["database"][0] == "ok", result.out + result.err
    missing = pgsched("doctor", env={"PGSCHED_DSN_FILE": str(tmp_path / "absent")})
    assert missing.code == 2
    assert f"PGSCHED_DSN_FILE: cannot read '{tmp_path / 'absent'}'" in missing.err
    assert "Traceback" not in missing.err


def test_a_role_the_database_refuses_gets_one_line_saying_so_not_a_traceback(dsn, conn):
    conn.execute("CREATE ROLE stranger LOGIN")
    stranger = connection.connect(dsn).info  # the test server's host and port
    url = f"postgresql://stranger@{stranger.host}:{stranger.port}/{stranger.dbname}"
    for argv in (("doctor",), ("runs", "nightly"), ("describe", "4711")):
        result = pgsched(*argv, dsn=url)
        assert result.code == 1, result.out + result.err
        assert "Traceback" not in result.err
        assert result.err.startswith(f"pgsched {argv[0]}: the database refused: permission denied")
        assert result.err.strip().endswith("(SQLSTATE 42501)")
