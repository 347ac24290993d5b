"""Fixtures of the chaos suite: a Postgres server of its own, crash-safe like production.

The shared test servers run with ``synchronous_commit=off``: fast, and they may forget the
last few hundred milliseconds of commits when the postmaster is killed. pgsched relies on
a commit being durable once acknowledged — a forgotten claim commit would let a launched
run be claimed and launched again — so the chaos server keeps the production default.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devenv.postgres import PostgresServer
from plugins.postgres import migrated_server


@pytest.fixture
def chaos_postgres() -> Iterator[PostgresServer]:
    yield from migrated_server({"synchronous_commit": "on"})
