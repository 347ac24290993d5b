"""A throwaway PostgreSQL server for tests, benchmarks and the demo.

Runs Debian's ``postgresql-15`` binaries (``/usr/lib/postgresql/15/bin``, override with
``PGSCHED_PG_BIN``) on a free loopback port with its data in a temporary directory.
PostgreSQL refuses to run as root, so when we are root every server command runs as the
``postgres`` system user through ``runuser`` and the data directory is handed to it.

The server is tuned for throwaway use (``fsync=off``): fast, and unsafe for real data.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from devenv.processes import free_port

DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
# How long a start or a promotion may take before it is an error: minutes, not the tools'
# 60 s default, because a 2-core machine running the test suite's two halves and a cluster
# has taken longer than that (a failed wait must mean a broken server, not a busy machine).
PATIENCE_SECONDS = 300.0
# A promotion not finished after this long is asked again (PostgresServer.promote).
PROMOTE_AGAIN_SECONDS = 5.0
OUT_OF_RECOVERY = "out of recovery"


@dataclass
class PostgresServer:
    """Start with :meth:`start`, stop with :meth:`stop` (or use as a context manager)."""

    base_dir: Path | None = None
    port: int = 0
    bin_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("PGSCHED_PG_BIN", DEFAULT_BIN))
    )
    settings: dict[str, str] = field(default_factory=dict)
    _owns_dir: bool = False

    def __post_init__(self) -> None:
        if not (self.bin_dir / "initdb").exists():
            raise RuntimeError(
                f"PostgreSQL binaries not found in {self.bin_dir}; install Debian's postgresql-15"
                " (apt-get install postgresql-15) or set PGSCHED_PG_BIN"
            )
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="pgsched-pg-"))
            self._owns_dir = True
        self.port = self.port or free_port()

    @property
    def data_dir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "server.log"

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def start(self) -> PostgresServer:
        assert self.base_dir is not None
        if not self.data_dir.exists():
            self._prepare_dirs()
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            )
        self._pg_ctl_start()
        return self

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def promote(self, *, timeout: float = PATIENCE_SECONDS) -> None:
        """Promote this hot standby and return once it is out of recovery.

        Asked again every ``PROMOTE_AGAIN_SECONDS`` while the standby is still in
        recovery: ``pg_ctl promote`` leaves a signal file and signals the postmaster, which
        tells its startup process. A standby restarting after a crash has no startup
        process for a moment (killing its WAL receiver, as the chaos harness does to lose
        the WAL in flight, restarts it), and a request that lands then is lost: the
        standby waits for WAL forever (seen once in a full run: 300 s, then a harness
        error). Waiting is minutes, not pg_ctl's 60 s, for a loaded 2-core machine; a
        give-up says whether the server still thought itself in recovery, what pg_ctl
        said last, and the log's tail."""
        deadline = time.monotonic() + timeout
        while True:
            said = self._run("pg_ctl", "-D", str(self.data_dir), "-W", "promote", check=False)
            again = min(deadline, time.monotonic() + PROMOTE_AGAIN_SECONDS)
            while time.monotonic() < again:
                if self._recovery_state() == OUT_OF_RECOVERY:
                    return
                time.sleep(0.2)
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"promoting the standby on port {self.port} did not finish within"
                    f" {timeout:.0f}s ({self._recovery_state()}; pg_ctl promote said:"
                    f" {said or 'nothing'})\n{self._log_tail()}"
                )

    def _recovery_state(self) -> str:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=5, autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error as error:
            return f"not answering: {error}".strip()
        return "still in recovery" if row and row[0] else OUT_OF_RECOVERY

    def restart(self) -> None:
        """Stop (fast: terminates every session) and start again on the same port."""
        self.stop()
        self._pg_ctl_start()

    def kill(self) -> None:
        """SIGKILL the postmaster: a crash, with recovery on the next start."""
        pid_file = self.data_dir / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)

    def cleanup(self) -> None:
        self.stop(mode="immediate")
        if self._owns_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _pg_ctl_start(self) -> None:
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.base_dir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "400",
            "shared_buffers": "256MB",
            **self.settings,
        }
        opts = f"-p {self.port} " + " ".join(f"-c {key}={value}" for key, value in options.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            f"{PATIENCE_SECONDS:.0f}",
            "-o",
            opts,
            "start",
        )

    def _prepare_dirs(self) -> None:
        assert self.base_dir is not None
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.base_dir, user.pw_uid, user.pw_gid)
            self.base_dir.chmod(0o700)

    def _run(self, tool: str, *args: str, check: bool = True) -> str:
        """Run a PostgreSQL tool as the postgres user; what it said on stderr."""
        command = [str(self.bin_dir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd="/")
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{tool} failed (exit {result.returncode}): {result.stderr.strip()}\n"
                f"{self._log_tail()}"
            )
        return result.stderr.strip()

    def _log_tail(self, lines: int = 20) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
