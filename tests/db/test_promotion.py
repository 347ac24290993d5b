"""The test harness's promotion of a standby (``devenv.postgres``), which the failover
tests and the chaos harness rely on: a promotion request that is lost is asked again.

A standby restarting after a crash (the chaos harness kills its WAL receiver to lose the
WAL in flight, which restarts it) has no startup process for a moment, and a request
landing then is lost: the standby waits for WAL forever. Here the loss is made certain:
the postmaster is stopped while ``pg_ctl promote`` writes its signal file, the file is
removed, and the postmaster then finds no request behind the signal."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from devenv import postgres
from devenv.postgres import PostgresServer
from devenv.waiting import wait_for
from standby import standby_of


@pytest.fixture
def primary() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()


def test_a_lost_promotion_request_is_asked_again(primary):
    standby = standby_of(primary)
    try:
        postmaster = int((standby.data_dir / "postmaster.pid").read_text().split()[0])
        request = standby.data_dir / "promote"
        os.kill(postmaster, signal.SIGSTOP)
        try:
            promoting = threading.Thread(target=standby.promote, kwargs={"timeout": 60})
            started = time.monotonic()
            promoting.start()
            wait_for(request.exists, 10, describe="pg_ctl promote to write its request")
            request.unlink()  # the first request is lost
        finally:
            os.kill(postmaster, signal.SIGCONT)
        promoting.join(60)
        took = time.monotonic() - started
        assert not promoting.is_alive()
        with psycopg.connect(standby.dsn()) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        # Promoted by the request asked again, not by waiting out the whole patience.
        assert postgres.PROMOTE_AGAIN_SECONDS <= took < postgres.PROMOTE_AGAIN_SECONDS + 20
    finally:
        standby.cleanup()
