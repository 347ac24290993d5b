"""A primary and a real streaming standby, failed over on demand, for the database chaos.

Stands in for the ``PostgresServer`` the driver is given (``dsn``, ``start``, ``restart``,
``kill``, ``cleanup`` act on the current primary) and adds ``failover``: the primary is
killed, the standby promoted, and the old primary rebuilt from the new one
(``pg_basebackup``) as the new standby, so the next failover goes the other way.

Clients use a multi-host DSN with ``target_session_attrs=read-write`` listing both servers,
so they follow the primary by themselves. ``synchronous=True`` keeps
``synchronous_standby_names = '*'`` on the primary while its standby is attached (like
Patroni's non-strict synchronous mode, it is lifted while the standby is being rebuilt,
or every commit would wait for a standby that is not there). ``synchronous=False`` is
asynchronous replication; ``lag_seconds`` freezes the standby's WAL receiver that long
before the primary dies, and kills it with the primary, so the commits of the last
``lag_seconds`` are lost — the window an asynchronous failover under load really has.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable

import psycopg

from chaos import faults
from devenv.postgres import PostgresServer
from standby import promote, standby_of


class ReplicatedPostgres:
    def __init__(
        self, primary: PostgresServer, *, synchronous: bool, lag_seconds: float = 0.0
    ) -> None:
        self.primary = primary
        self.synchronous = synchronous
        self.lag_seconds = lag_seconds
        self.standby = standby_of(primary, settings={"synchronous_commit": "on"})
        self.failovers = 0
        if synchronous:
            self._require_standby(self.primary, True)

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        ports = f"{self.primary.port},{self.standby.port}"
        return (
            f"host=127.0.0.1,127.0.0.1 port={ports} user={user} dbname={dbname}"
            " target_session_attrs=read-write"
        )

    def start(self) -> None:
        self.primary.start()

    def restart(self) -> None:
        self.primary.restart()

    def kill(self) -> None:
        self.primary.kill()

    def cleanup(self) -> None:
        self.standby.cleanup()
        self.primary.cleanup()

    def failover(self, *, hold: Callable[[], object] | None = None) -> str:
        """Kill the primary, promote the standby, rebuild the old primary as its standby.
        ``hold``: called while the standby's WAL receiver is frozen, after the lag, to
        make the lost window last until something worth losing happened in it."""
        if self.lag_seconds:
            receiver = self._wal_receiver_pid()
            frozen = time.monotonic()
            faults.send(receiver, signal.SIGSTOP)
            time.sleep(self.lag_seconds)
            if hold is not None:
                hold()
            lost = time.monotonic() - frozen
        killed = time.monotonic()
        self.primary.kill()
        if self.lag_seconds:
            # Woken, the receiver would still read what the primary had sent into its
            # socket before dying (seconds of WAL fit in the buffers, so little was lost).
            # Killed, that is lost with the primary, as when the network failed first.
            faults.send(receiver, signal.SIGKILL)
        try:
            promote(self.standby)
        except RuntimeError as error:
            raise faults.HarnessError(
                f"the failover could not be injected: the primary was killed, then {error}"
            ) from error
        old, self.primary, self.standby = self.primary, self.standby, self.primary
        if self.synchronous:
            self._require_standby(self.primary, False)  # nothing to wait for until rebuilt
        writable = self._wait_writable() - killed
        started = time.monotonic()
        self._rebuild(old)
        if self.synchronous:
            self._require_standby(self.primary, True)
        self.failovers += 1
        return (
            f"{'synchronous' if self.synchronous else 'asynchronous'} failover to port"
            f" {self.primary.port}"
            + (f" ({lost:.1f}s of WAL lost)" if self.lag_seconds else "")
            + f": writable {writable:.1f}s after the kill, old primary rebuilt as standby in"
            f" {time.monotonic() - started:.1f}s"
        )

    def _rebuild(self, old: PostgresServer) -> None:
        old.stop(mode="immediate")
        shutil.rmtree(old.data_dir, ignore_errors=True)
        self.standby = standby_of(self.primary, settings={"synchronous_commit": "on"}, server=old)

    def _wait_writable(self, timeout: float = 30.0) -> float:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.primary.dsn(), connect_timeout=2) as conn:
                    if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:  # type: ignore[index]
                        return time.monotonic()
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the promoted standby did not accept writes")
            time.sleep(0.05)

    def _wal_receiver_pid(self) -> int:
        with psycopg.connect(self.standby.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        if row is None:
            raise RuntimeError("the standby has no WAL receiver")
        return int(row[0])

    @staticmethod
    def _require_standby(server: PostgresServer, required: bool) -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            value = "'*'" if required else "''"
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = {value}")
            conn.execute("SELECT pg_reload_conf()")
