"""A replica that starts afresh never leads on a former primary that came back writable.

Split brain, for real: a streaming standby is promoted (WAL timeline 2) while the old
primary keeps running writable on timeline 1. The multi-host DSN lists the old primary
first, with ``target_session_attrs=read-write``, so libpq alone connects to it. A new tick
replica (no memory of timeline 2) must still lead on the promoted standby: on connect it
asks the other listed hosts and passes over the member on the older timeline; so do job
pods' sessions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from devenv.postgres import PostgresServer
from factories import RecordingLauncher
from pgsched.db import connection, primaries
from pgsched.db.session import Session
from pgsched.engine.tick import Ticker, TickSettings
from plugins.postgres import migrated_server
from standby import promote, standby_of, wait_caught_up


@pytest.fixture
def split_brain() -> Iterator[tuple[PostgresServer, PostgresServer, str]]:
    """(old primary, promoted standby, a DSN listing the old primary first)."""
    servers = migrated_server()
    old = next(servers)
    new = standby_of(old)
    try:
        wait_caught_up(old, new)
        promote(new)
        dsn = (
            f"host=127.0.0.1,127.0.0.1 port={old.port},{new.port} user=postgres"
            " dbname=postgres target_session_attrs=read-write"
        )
        yield old, new, dsn
    finally:
        new.cleanup()
        servers.close()


def timeline(conn: connection.Connection) -> int:
    row = conn.execute("SELECT pgsched.current_timeline() AS t").fetchone()
    assert row is not None
    return int(row["t"])


def test_libpq_alone_takes_the_first_writable_host_the_former_primary(split_brain):
    old, _, dsn = split_brain
    with connection.connect(dsn) as conn:
        assert (conn.info.port, timeline(conn)) == (old.port, 1)


def test_a_fresh_replica_leads_on_the_newest_timeline_not_on_the_former_primary(
    split_brain, caplog
):
    _, new, dsn = split_brain
    ticker = Ticker(
        lambda: primaries.connect(dsn, application_name="pgsched-tick"),
        RecordingLauncher(),
        TickSettings(),
    )
    try:
        with caplog.at_level(logging.WARNING, logger="pgsched.db.primaries"):
            assert ticker.run_once().leader
        conn = ticker._session.connection()
        assert (conn.info.port, timeline(conn)) == (new.port, 2)
        [warning] = [r.getMessage() for r in caplog.records]
        assert "split brain" in warning and f"Connecting to 127.0.0.1:{new.port}" in warning
    finally:
        ticker.close()


def test_with_one_writable_host_nothing_changes(split_brain):
    """The old primary demoted (here: stopped): the probe finds nobody newer, no warning."""
    old, new, dsn = split_brain
    old.stop()
    with primaries.connect(dsn, application_name="pgsched-tick") as conn:
        assert (conn.info.port, timeline(conn)) == (new.port, 2)


def test_job_pods_sessions_pass_over_the_former_primary_too(split_brain):
    """The heartbeat sidecar and the SDK runner (``Session.for_dsn``): a job claimed on the
    real primary heartbeats there, instead of being told ``lost`` by the old one."""
    _, new, dsn = split_brain
    session = Session.for_dsn(dsn, application_name="pgsched-sidecar-1")
    try:
        assert session.connection().info.port == new.port
    finally:
        session.close()
