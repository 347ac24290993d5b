"""A frozen database server costs the tick seconds, not the length of the freeze.

A server whose processes are stopped (SIGSTOP: a stalled VM, a hung storage layer, an old
primary frozen mid-failover) keeps its TCP connections alive — the kernel acknowledges
every byte and every keepalive — and cannot enforce its own ``statement_timeout``. The
tick session bounds every wait for an answer (``connection.BoundedConnection``, the
tick's stall bound), so the tick fails open, reconnects, and with a multi-host DSN works
on the next host. Real servers, really stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devenv.postgres import PostgresServer
from factories import RecordingLauncher
from pgsched.db import connection
from pgsched.engine.tick import Ticker, TickSettings
from plugins.postgres import migrated_server

BOUND = 2.0  # the tick's stall bound in these tests (default: max(30 s, 10 ticks))
SLACK = 3.0  # a loaded machine


def processes_of(server: PostgresServer) -> list[int]:
    """The postmaster and every process it started."""
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


@contextlib.contextmanager
def frozen(server: PostgresServer) -> Iterator[None]:
    pids = processes_of(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@pytest.fixture
def second_server() -> Iterator[PostgresServer]:
    servers = migrated_server()
    yield next(servers)
    servers.close()


def ticker(dsn: str) -> Ticker:
    return Ticker(
        lambda: connection.connect(dsn, application_name="pgsched-tick"),
        RecordingLauncher(),
        TickSettings(interval_seconds=0.2, leader_stall_seconds=BOUND),
    )


def timed_tick(replica: Ticker) -> tuple[float, str | None, bool]:
    started = time.monotonic()
    result = replica.run_once()
    return time.monotonic() - started, result.error, result.leader


def test_a_tick_on_a_frozen_server_fails_within_its_bound_and_recovers_after(private_postgres):
    replica = ticker(private_postgres.dsn())
    assert timed_tick(replica)[2], "the replica leads on the live server"

    with frozen(private_postgres):
        took, error, _ = timed_tick(replica)

    assert took < BOUND + SLACK, f"a tick on the frozen server took {took:.1f}s"
    assert error is not None and f"did not answer within {BOUND:g}s" in error, error
    _, error, leader = timed_tick(replica)
    assert error is None and leader, "after the thaw the replica reconnects and leads"
    replica.close()


def test_with_a_multi_host_dsn_the_replica_moves_on_to_the_next_host(
    private_postgres, second_server
):
    frozen_port, live_port = private_postgres.port, second_server.port
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={frozen_port},{live_port} user=postgres"
        " dbname=postgres target_session_attrs=read-write"
    )
    replica = ticker(dsn)
    assert timed_tick(replica)[2]

    with frozen(private_postgres):
        started = time.monotonic()
        _, error, _ = timed_tick(replica)
        assert error is not None and f"did not answer within {BOUND:g}s" in error, error
        while not (result := timed_tick(replica))[2]:
            assert time.monotonic() - started < 30, f"still not leading: {result[1]}"
        moved = time.monotonic() - started
        port = replica._session.connection().info.port

    assert port == live_port
    # the bound, then the frozen host's connect timeout, then the live host
    assert moved < BOUND + connection.CONNECT_TIMEOUT_SECONDS + SLACK, f"{moved:.1f}s"
    print(f"\nfrozen first host: the replica led on the second after {moved:.1f}s")
    replica.close()
