"""Fixtures of the chaos suite: a Postgres server of its own, crash-safe like production.

The shared test servers run with ``synchronous_commit=off``: fast, and they may forget the
last few hundred milliseconds of commits when the postmaster is killed. pgsched relies on
a commit being durable once acknowledged — a forgotten claim commit would let a launched
run be claimed and launched again — so the chaos server keeps the production default.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pgsched.db import connection, migrate
from pgsched.devenv.postgres import PostgresServer


@pytest.fixture
def chaos_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(settings={"synchronous_commit": "on"}).start()
    try:
        with connection.connect(server.dsn()) as conn:
            migrate.migrate(conn)
        yield server
    finally:
        server.cleanup()
