"""How far the standbys have flushed, as the operator sees it (``db/replication.py``): what
decides when a request annotation may be removed (``k8s/scheduledjobs/commands.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cli_runner import pgsched
from devenv.postgres import PostgresServer
from pgsched.db import connection, replication
from plugins.postgres import migrated_server
from standby import receiver_paused, standby_of, wait_caught_up


@pytest.fixture
def primary() -> Iterator[PostgresServer]:
    yield from migrated_server()


def write(conn: connection.Connection) -> replication.Position:
    conn.execute("CREATE TABLE IF NOT EXISTS public.written (n int)")
    conn.execute("INSERT INTO public.written VALUES (1)")
    return replication.progress(conn).position


def test_a_commit_is_flushed_once_every_standby_has_it_and_at_once_without_one(primary):
    with connection.connect(primary.dsn()) as conn:
        assert replication.progress(conn).flushed(write(conn))  # nothing to fail over to
        standby = standby_of(primary)
        try:
            wait_caught_up(primary, standby)
            with receiver_paused(standby):
                position = write(conn)
                seen = replication.progress(conn)
                assert seen.least_flushed is not None and not seen.flushed(position)
            wait_caught_up(primary, standby)
            assert replication.progress(conn).flushed(position)
            other = replication.Position(position.timeline + 1, position.lsn)
            assert not replication.progress(conn).flushed(other)  # a failover came between
        finally:
            standby.cleanup()


def test_a_role_that_cannot_see_the_standbys_positions_is_told_what_to_grant(primary):
    with connection.connect(primary.dsn()) as admin:
        admin.execute("CREATE ROLE blind LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA pgsched TO blind")
        admin.execute("GRANT EXECUTE ON FUNCTION pgsched.current_timeline() TO blind")
        standby = standby_of(primary)
        try:
            wait_caught_up(primary, standby)
            with connection.connect(primary.dsn(user="blind")) as conn:
                assert replication.progress(conn).unseen == 1
                said = replication.blind_to_standbys(conn)
                assert said is not None and said.startswith(
                    "1 streaming standby(s) connected whose flushed position this role may not see"
                )
                assert said.endswith("GRANT pg_read_all_stats TO blind")
            admin.execute("GRANT pg_read_all_stats TO blind")
            with connection.connect(primary.dsn(user="blind")) as conn:
                assert replication.blind_to_standbys(conn) is None
                assert replication.progress(conn).least_flushed is not None
        finally:
            standby.cleanup()


def test_doctor_run_as_a_role_blind_to_the_standbys_says_what_to_grant(primary):
    with connection.connect(primary.dsn()) as admin:
        admin.execute("CREATE ROLE watcher LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA pgsched TO watcher")
        admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA pgsched TO watcher")
        admin.execute("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched TO watcher")
        standby = standby_of(primary)
        try:
            wait_caught_up(primary, standby)
            found = doctor_checks(primary.dsn(user="watcher"))
            # Not the operator's role: the session check says so instead of a traceback.
            status, detail = found["session"]
            assert (
                status == "FAIL" and "permission denied for function pg_try_advisory_lock" in detail
            )
            assert detail.endswith("connect as the role that ran `pgsched migrate`")
            status, detail = found["replication"]
            assert status == "warn"
            assert "1 streaming standby(s) connected whose flushed position" in detail
            assert detail.endswith("GRANT pg_read_all_stats TO watcher")
            admin.execute("GRANT pg_read_all_stats TO watcher")
            status, detail = doctor_checks(primary.dsn(user="watcher"))["replication"]
            assert "pg_read_all_stats" not in detail
        finally:
            standby.cleanup()


def doctor_checks(dsn: str) -> dict[str, tuple[str, str]]:
    result = pgsched("doctor", "-o", "json", dsn=dsn)
    assert result.out.startswith("{"), result.out + result.err
    return {item["check"]: (item["status"], item["detail"]) for item in result.json()["checks"]}
