"""Small builders shared by tests: definitions from spec snippets, a recording launcher, a
database as an older release left it."""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from pgsched import spec as spec_module
from pgsched.db import clock, connection, migrate
from pgsched.db.connection import Connection
from pgsched.engine import definitions, reap
from pgsched.engine.launcher import LaunchError
from pgsched.engine.models import Definition, Run

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def define(
    conn: Connection,
    name: str = "job",
    *,
    namespace: str = "default",
    now: datetime | None = None,
    created_at: datetime | None = None,
    generation: int = 1,
    uid: uuid.UUID | None = None,
    **spec: Any,
) -> Definition:
    """Upsert a definition from camelCase spec fields (default: every minute, unless it
    runs after others)."""
    if not {"schedule", "rrule", "runAt", "after", "schedules"} & spec.keys():
        spec["schedule"] = "* * * * *"
    created = created_at or now or EPOCH
    parsed = spec_module.parse(
        spec, hash_seed=f"{namespace}/{name}", anchor=created, now=now or created
    )
    key = definitions.DefinitionKey(
        id=uid or uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        generation=generation,
        created_at=created,
    )
    return definitions.upsert(conn, key, parsed, raw_spec=spec, now=now)


@dataclass
class RecordingLauncher:
    """Records every launch; fails launches of run ids in ``fail_ids``."""

    launched: list[Run] = field(default_factory=list)
    fail_ids: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, run: Run, definition: Definition) -> str | None:
        if run.id in self.fail_ids:
            raise LaunchError(f"refusing to launch run {run.id} (test)")
        with self._lock:
            self.launched.append(run)
        return f"{definition.name}-{run.id}"


def no_database() -> Connection:
    """The Kubernetes launcher's ``connect`` where a launch must never ask the database
    (only adopting an earlier claim's Job does)."""
    raise AssertionError("this launch asked the database: it adopted an earlier claim's Job")


def lose_claim(conn: Connection, run_id: int) -> None:
    """The run as a standby promoted before its claim's commit reached it has it: QUEUED,
    never started, no lease (and no trigger fires: on that standby, nothing happened)."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "UPDATE pgsched.job_runs SET status = 'QUEUED', started_at = NULL,"
            " heartbeat_at = NULL, lease_token = NULL WHERE id = %s AND status = 'RUNNING'",
            [run_id],
        )


def runs_of(conn: Connection, definition: Definition) -> list[dict[str, Any]]:
    """All run rows of a definition, oldest first."""
    return conn.execute(
        "SELECT * FROM pgsched.job_runs WHERE definition_id = %s ORDER BY scheduled_for, id",
        [definition.id],
    ).fetchall()


def reload(conn: Connection, definition: Definition) -> Definition:
    found = definitions.get(conn, definition.id)
    assert found is not None
    return found


def job_login(admin: Connection, dsn: str) -> tuple[str, str]:
    """A new login in the job role (as the chart's job pods get), and its DSN."""
    user = f"job_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE ROLE {user} LOGIN IN ROLE pgsched_job")
    admin.execute(f"GRANT CONNECT ON DATABASE {admin.info.dbname} TO {user}")
    return user, dsn.replace("user=postgres", f"user={user}")


def refused_to(dsn: str, statements: Iterable[str]) -> None:
    """Each statement, run by the login of ``dsn``, fails for want of a privilege."""
    with connection.connect(dsn) as login:
        for statement in statements:
            try:
                login.execute(statement)
            except psycopg.errors.InsufficientPrivilege:
                continue
            raise AssertionError(f"{statement!r} was allowed")


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def schema_tool() -> ModuleType:
    """``hack/schema.py``, which writes schema.sql: its dump is what tests compare schemas by."""
    path = Path(__file__).resolve().parents[1] / "hack" / "schema.py"
    spec = importlib.util.spec_from_file_location("schema_tool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def database_at(postgres: Any, name: str, version: int) -> str:
    """A new database with the migrations up to ``version`` applied, as that release left it."""
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    with connection.connect(postgres.dsn(name)) as conn:
        migrate.create_ledger(conn)
        for migration in migrate.available():
            if migration.version <= version:
                migrate.apply(conn, migration)
    return str(postgres.dsn(name))


def reap_an_hour_later(conn: Connection) -> reap.ReapResult:
    """The reaper with the clock pinned an hour ahead, so every live heartbeat is stale;
    the run API counts as served throughout that hour (its presence stamped up to then),
    so the hour is the pods' silence, not the API's absence (``pgsched.silent_since``)."""
    later = clock.now(conn) + timedelta(hours=1)
    conn.execute("UPDATE pgsched.run_api_presence SET seen_at = %s", [later])
    return reap.run_once(conn, now=later)
