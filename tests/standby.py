"""A real streaming standby of a test server: pg_basebackup, start, promote, and a
receiver that stops taking WAL while the standby stays connected.

For tests of what a failover does to pgsched (run ids, lost commits). The standby is a
``PostgresServer`` whose data directory comes from ``pg_basebackup -R`` instead of initdb,
so it starts as a hot standby streaming from ``primary``.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psycopg

from devenv.postgres import PostgresServer


def _as_postgres(command: list[str]) -> None:
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, cwd="/")
    if result.returncode != 0:
        raise RuntimeError(f"{command[-1]} failed: {result.stderr.strip()}")


def standby_of(
    primary: PostgresServer,
    *,
    settings: dict[str, str] | None = None,
    server: PostgresServer | None = None,
) -> PostgresServer:
    """A started hot standby streaming from ``primary`` (clean it up like any server):
    a new server, or ``server`` (stopped, its data directory removed) rebuilt as one."""
    standby = server or PostgresServer()
    standby.settings = {**standby.settings, "hot_standby": "on", **(settings or {})}
    assert standby.base_dir is not None
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(standby.base_dir, user.pw_uid, user.pw_gid)
    _as_postgres(
        [
            str(standby.bin_dir / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(standby.data_dir),
            "-R",
            "-X",
            "stream",
            "--no-sync",
            "--checkpoint=fast",  # do not wait for the primary's next spread checkpoint
        ]
    )
    return standby.start()


def promote(standby: PostgresServer) -> None:
    standby.promote()


def wait_caught_up(primary: PostgresServer, standby: PostgresServer, timeout: float = 30) -> None:
    """Until the standby has replayed everything the primary wrote so far."""
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()
            if row and row[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {target} in {timeout}s")
            time.sleep(0.05)


@contextmanager
def receiver_paused(standby: PostgresServer) -> Iterator[int]:
    """The standby's WAL receiver stopped (SIGSTOP) for the block, resumed after: the
    standby stays connected and listed in the primary's ``pg_stat_replication`` but flushes
    nothing more, as a standby behind a slow network does. (Stopping the standby instead
    would unlist it; ``pg_wal_replay_pause()`` stops replay, not receiving.) Yields the
    receiver's pid: SIGKILL it to lose what it had not received, as a crash does."""
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
    assert row is not None and row[0], "the standby has no WAL receiver"
    pid = int(row[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with suppress(ProcessLookupError):  # killed on purpose
            os.kill(pid, signal.SIGCONT)
