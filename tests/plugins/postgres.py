"""A real PostgreSQL 15 server for the test session, and a fresh database per test.

The server is started once (``initdb`` + ``pg_ctl``, as the ``postgres`` user when the tests
run as root). A template database is migrated once; each test gets its own copy, created
from the template in milliseconds, so tests never see each other's rows.

Tests that restart or kill the server use ``private_postgres`` instead: a server of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from devenv.postgres import PostgresServer
from pgsched.db import connection, migrate

TEMPLATE = "pgsched_template"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        with connection.connect(server.dsn()) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with connection.connect(server.dsn(TEMPLATE)) as conn:
            migrate.migrate(conn)
        yield server
    finally:
        server.cleanup()


def migrated_database(postgres: PostgresServer) -> str:
    """A connection string to a new database copied from the migrated template."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return postgres.dsn(name)


@pytest.fixture
def dsn(postgres: PostgresServer) -> Iterator[str]:
    """A connection string to a freshly migrated database of this test's own."""
    found = migrated_database(postgres)
    yield found
    name = found.rsplit("dbname=", 1)[1]
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def conn(dsn: str) -> Iterator[connection.Connection]:
    with connection.connect(dsn, application_name="pgsched-test") as db:
        yield db


@pytest.fixture
def job_dsn(dsn: str, conn: connection.Connection) -> Iterator[str]:
    """A login of the job pods' role (``pgsched_job``) on the test's database."""
    user = f"job_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {user} LOGIN IN ROLE pgsched_job")
    database = conn.info.dbname
    conn.execute(f"GRANT CONNECT ON DATABASE {database} TO {user}")
    yield dsn.replace("user=postgres", f"user={user}")
    conn.execute(f"DROP OWNED BY {user}")
    conn.execute(f"DROP ROLE {user}")


def migrated_server(settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """A server of its own with the schema migrated, removed afterwards (fixture body)."""
    server = PostgresServer(settings=settings or {}).start()
    try:
        with connection.connect(server.dsn()) as conn:
            migrate.migrate(conn)
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A migrated server of the test's own, for tests that restart or kill it."""
    yield from migrated_server()


def terminate_backends(dsn: str, *, application_name: str) -> int:
    """``pg_terminate_backend`` every session with this application_name; returns how many."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        ).fetchall()
    return len(rows)
