"""One dead host in a multi-host DSN costs seconds, not minutes, on every connection.

The dead host is the worst kind: it accepts TCP connections and never answers (a hung
server, a half-dead proxy), so only a connect timeout gets past it. It comes first in a
multi-host DSN with ``target_session_attrs=read-write``, as a failover setup would list
an old primary; the real server comes second.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from factories import RecordingLauncher
from pgsched.db import connection
from pgsched.db.session import Session
from pgsched.engine.tick import Ticker, TickSettings

# connect_timeout per host, plus the real host's own connect and some slack for a busy machine.
WORKS_WITHIN = connection.CONNECT_TIMEOUT_SECONDS + 4


@pytest.fixture
def silent_host() -> Iterator[int]:
    """A port that accepts connections and never sends a byte; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for peer in accepted:
        peer.close()
    server.close()


@pytest.fixture
def multi_host_dsn(dsn: str, silent_host: int) -> str:
    parts = dict(item.split("=", 1) for item in dsn.split())
    return (
        f"host=127.0.0.1,127.0.0.1 port={silent_host},{parts['port']} user={parts['user']}"
        f" dbname={parts['dbname']} target_session_attrs=read-write"
    )


def timed(action) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def test_a_connection_gets_past_a_silent_first_host_within_the_connect_timeout(multi_host_dsn):
    def connect_and_query() -> None:
        with connection.connect(multi_host_dsn) as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}

    seconds = timed(connect_and_query)
    print(f"\nconnection past a silent first host: {seconds:.1f}s")
    assert connection.CONNECT_TIMEOUT_SECONDS - 1 <= seconds < WORKS_WITHIN


def test_the_handler_pool_gets_past_a_silent_first_host_within_the_connect_timeout(
    multi_host_dsn,
):
    def first_connection() -> None:
        with (
            connection.pool(multi_host_dsn, name="pgsched-test-pool", max_size=2) as pool,
            pool.connection(timeout=60) as conn,
        ):
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}

    seconds = timed(first_connection)
    print(f"\nhandler pool past a silent first host: {seconds:.1f}s")
    assert seconds < WORKS_WITHIN


def test_the_tick_leads_on_the_live_host_within_the_connect_timeout(multi_host_dsn):
    ticker = Ticker(
        lambda: connection.connect(multi_host_dsn, application_name="pgsched-tick"),
        RecordingLauncher(),
        TickSettings(),
    )
    try:
        started = time.monotonic()
        result = ticker.run_once()
        seconds = time.monotonic() - started
    finally:
        ticker.close()
    print(f"\ntick past a silent first host: {seconds:.1f}s")
    assert result.leader and result.error is None
    assert seconds < WORKS_WITHIN


def test_a_job_session_gets_past_a_silent_first_host_within_the_connect_timeout(multi_host_dsn):
    session = Session.for_dsn(multi_host_dsn, application_name="pgsched-sidecar-test")
    try:
        seconds = timed(lambda: session.run(lambda conn: conn.execute("SELECT 1").fetchone()))
    finally:
        session.close()
    print(f"\njob session past a silent first host: {seconds:.1f}s")
    assert seconds < WORKS_WITHIN


def test_a_dsn_that_sets_its_own_connect_timeout_keeps_it(multi_host_dsn):
    seconds = timed(lambda: connection.connect(f"{multi_host_dsn} connect_timeout=2").close())
    assert seconds < 2 + 3
