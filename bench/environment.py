"""Where the benchmarks run: one throwaway PostgreSQL server, a fresh database per benchmark.

Every figure is a ratio to a baseline measured on the same server in the same run, so the
server is the project's throwaway one (:class:`devenv.postgres.PostgresServer`,
``fsync=off``): absolute numbers are optimistic for a durable server, ratios much less so.
Autovacuum keeps its defaults on purpose — the bloat benchmark is about exactly that.

:func:`machine` records what the numbers were measured on, since on a shared 2-core box
load from other processes is the biggest source of noise.
"""

from __future__ import annotations

import contextlib
import os
import platform
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import queries
from devenv.postgres import PostgresServer
from pgsched.db import connection, migrate

SETTINGS = (
    "shared_buffers",
    "fsync",
    "synchronous_commit",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "max_connections",
)


@dataclass
class Environment:
    server: PostgresServer
    _databases: list[str] = field(default_factory=list)

    def create_database(self, prefix: str) -> str:
        """A new migrated database; returns its DSN. Dropped by :meth:`drop_databases`."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with connection.connect(self.server.dsn()) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self._databases.append(name)
        dsn = self.server.dsn(name)
        with connection.connect(dsn) as conn:
            migrate.migrate(conn)
        return dsn

    def drop_databases(self) -> None:
        with connection.connect(self.server.dsn()) as admin:
            for name in self._databases:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self._databases.clear()

    def pg_tool(self, name: str) -> list[str]:
        """Command prefix for a PostgreSQL client tool (as ``postgres`` when we are root)."""
        command = [str(self.server.bin_dir / name)]
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def environment() -> Iterator[Environment]:
    server = PostgresServer().start()
    env = Environment(server)
    try:
        yield env
    finally:
        server.cleanup()


def machine(dsn: str) -> dict[str, Any]:
    """CPU, memory, load and server version: the context every result file carries."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(queries.get("server_version")).fetchone()
        settings = dict(
            conn.execute(queries.get("server_settings"), {"names": list(SETTINGS)}).fetchall()
        )
    return {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "postgres": row[0] if row else None,
        "postgres_settings": settings,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
