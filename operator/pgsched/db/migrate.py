"""Schema migrations: numbered SQL files applied once, then function files re-applied when changed.

``pgsched/sql/migrations/NNNN_name.sql`` hold tables, types and data changes. They are
applied in version order, each in its own transaction together with its ledger row
(``pgsched.schema_migrations``), so a migration is either fully applied and recorded or not
at all. A migration file that changed after it was applied, or a database newer than this
code, stops the run with an explanation instead of guessing.

``pgsched/sql/functions/<name>.sql`` hold every function whole, with its grants, as
Flyway's repeatable migrations do: after the numbered migrations, every file whose
checksum differs from the one in ``pgsched.schema_functions`` is applied, all in one
transaction, so a reader finds a function's live body in one place and ``git blame``
shows its history. A function whose contract changes gets a new name instead, so the
previous release's replicas keep calling the old one during a rollout
(docs/architecture.md, "Migrations").

Several operator replicas start at once and all try to migrate: every transaction here
first locks the migrations ledger, so a second replica waits, then finds the work done.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString, TypeVar

import psycopg

from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION_FILE = re.compile(r"^([a-z0-9_]+)\.sql$")
T = TypeVar("T")

_LOCK = "LOCK TABLE pgsched.schema_migrations IN SHARE ROW EXCLUSIVE MODE"
# How long one wait for the ledger's lock lasts before it starts again in a new transaction
# (_under_ledger_lock).
_LEDGER_LOCK_WAIT: LiteralString = "SET LOCAL lock_timeout = '2s'"
# Migrations whose text was revised after release without changing the schema they leave
# (a guard narrowed): version → checksums of their earlier texts, still accepted as applied.
# 0030's wait for old transactions counted sessions of every database on the server, so a
# long transaction in another database failed a fresh install's migration after 60 s.
REVISED: dict[int, frozenset[str]] = {
    30: frozenset({"77754dad8a32ff0be28a9fad9a2f1fba02ea6f64f2e79dd1f01f0d7ab3a4631a"}),
}


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


@dataclass(frozen=True)
class FunctionFile:
    """``sql/functions/<name>.sql``: the function ``pgsched.<name>`` (all its overloads)."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


@dataclass(frozen=True)
class MigrateResult:
    applied: list[int]
    current: int
    functions: list[str]  # the function files applied (new or changed), by name


def _checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def available() -> list[Migration]:
    folder = resources.files("pgsched") / "sql" / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda migration: migration.version)
    # Numbers are unique, not contiguous: they are handed out to changes developed in
    # parallel, so one may land before a lower one (docs/architecture.md, "Migrations").
    versions = [migration.version for migration in found]
    if len(set(versions)) != len(versions) or 0 in versions:
        raise MigrationError(f"migration versions must be unique and from 1 up, found {versions}")
    return found


def function_files() -> list[FunctionFile]:
    folder = resources.files("pgsched") / "sql" / "functions"
    found = [
        FunctionFile(match.group(1), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if (match := _FUNCTION_FILE.match(entry.name))
    ]
    return sorted(found, key=lambda function: function.name)


def latest_version() -> int:
    return available()[-1].version


def current_version(conn: Connection) -> int:
    """The schema version recorded in the database (0 when pgsched was never installed)."""
    row = conn.execute(
        "SELECT to_regclass('pgsched.schema_migrations') IS NOT NULL AS ok"
    ).fetchone()
    if not row or not row["ok"]:
        return 0
    row = conn.execute(
        "SELECT coalesce(max(version), 0) AS v FROM pgsched.schema_migrations"
    ).fetchone()
    return int(row["v"]) if row else 0


def migrate(conn: Connection) -> MigrateResult:
    """Bring the schema up to date; safe to call from many processes at once."""
    migrations = available()
    create_ledger(conn)
    applied = {
        row["version"]: row["checksum"]
        for row in conn.execute("SELECT version, checksum FROM pgsched.schema_migrations")
    }
    _check_ledger(applied, migrations)
    done = []
    for migration in migrations:
        if migration.version not in applied and apply(conn, migration):
            done.append(migration.version)
    return MigrateResult(
        applied=done, current=migrations[-1].version, functions=apply_functions(conn)
    )


def changed_functions(conn: Connection) -> list[FunctionFile]:
    """The function files whose checksum differs from the ledger's (all of them before the
    ledger exists)."""
    ledger = conn.execute(
        "SELECT to_regclass('pgsched.schema_functions') IS NOT NULL AS ok"
    ).fetchone()
    recorded = {}
    if ledger and ledger["ok"]:
        rows = conn.execute("SELECT name, checksum FROM pgsched.schema_functions")
        recorded = {row["name"]: row["checksum"] for row in rows}
    return [
        function
        for function in function_files()
        if recorded.get(function.name) != function.checksum
    ]


def create_ledger(conn: Connection) -> None:
    """The ``pgsched`` schema and its ledger of applied migrations, if missing."""
    for attempt in (1, 2):
        try:
            with conn.transaction():
                conn.execute("CREATE SCHEMA IF NOT EXISTS pgsched")
                conn.execute(
                    """
                    CREATE TABLE IF NOT EXISTS pgsched.schema_migrations (
                        version    integer PRIMARY KEY,
                        name       text        NOT NULL,
                        checksum   text        NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now()
                    )
                    """
                )
            return
        except psycopg.errors.UniqueViolation:
            # "IF NOT EXISTS" is not atomic: a process creating the same object at the
            # same instant makes this one fail once; the second attempt finds it.
            if attempt == 2:
                raise


def apply(conn: Connection, migration: Migration) -> bool:
    """One migration and its ledger row, in one transaction; False when another process
    applied it first."""

    def body() -> bool:
        if conn.execute(
            "SELECT 1 FROM pgsched.schema_migrations WHERE version = %s", [migration.version]
        ).fetchone():
            return False
        log.info("applying migration %04d_%s", migration.version, migration.name)
        conn.execute(migration.sql)
        conn.execute(
            "INSERT INTO pgsched.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            [migration.version, migration.name, migration.checksum],
        )
        return True

    try:
        return _under_ledger_lock(conn, body)
    except psycopg.Error as error:
        raise MigrationError(
            f"migration {migration.version:04d}_{migration.name} failed and was rolled"
            f" back: {error}"
        ) from error


def _under_ledger_lock(conn: Connection, body: Callable[[], T]) -> T:
    """``body`` in a transaction that holds the ledger's table lock, on which migrating
    processes queue. Only roles with privileges on the ledger can take it: an advisory
    lock, any login could hold (docs/architecture.md, "Locks no tenant can take").

    The wait for the lock is bounded and retried in a new transaction. A process's
    transaction begins a round trip before its lock request; another process that takes the
    lock in between and applies migration 0030 waits for every transaction older than its
    own, this one's included, while this one waits for the lock: each would wait for the
    other until 0030 gave up after 60 s (seen with eight replicas migrating at once). A
    transaction begun after the retry is younger than 0030's, which does not wait for it."""
    while True:
        locked = False
        try:
            with conn.transaction():
                row = conn.execute("SELECT current_setting('lock_timeout') AS value").fetchone()
                conn.execute(_LEDGER_LOCK_WAIT)
                conn.execute(_LOCK)
                locked = True
                # The body waits for its own locks as the session would have.
                conn.execute("SELECT set_config('lock_timeout', %s, true)", [row and row["value"]])
                return body()
        except psycopg.errors.LockNotAvailable:
            if locked:
                raise
            log.info("the migration ledger is locked by another process; waiting for it")


def apply_functions(conn: Connection) -> list[str]:
    """Every new or changed function file and its ledger row, in one transaction after the
    numbered migrations; the names applied (none when another process applied them first)."""
    if not changed_functions(conn):
        return []  # every start of every replica asks; only a change takes the lock
    in_flight: list[FunctionFile] = []

    def body() -> list[str]:
        changed = changed_functions(conn)
        # As pg_restore does: SQL-language bodies are checked once every file is in,
        # so a file may call a function whose file sorts after it or is new too.
        conn.execute("SET LOCAL check_function_bodies = off")
        for function in changed:
            in_flight[:] = [function]
            log.info("applying function file %s.sql", function.name)
            conn.execute(function.sql)
            conn.execute(
                "INSERT INTO pgsched.schema_functions (name, checksum) VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE"
                " SET checksum = excluded.checksum, applied_at = now()",
                [function.name, function.checksum],
            )
        in_flight.clear()
        conn.execute("SET LOCAL check_function_bodies = on")
        conn.execute(_VALIDATE, {"names": [function.name for function in changed]})
        return [function.name for function in changed]

    try:
        return _under_ledger_lock(conn, body)
    except psycopg.Error as error:
        where = f"function file {in_flight[0].name}.sql" if in_flight else "the function files"
        raise MigrationError(
            f"{where} failed and every function file of this run was rolled back: {error}"
        ) from error


# The languages' own validators, called as CREATE FUNCTION calls them when
# check_function_bodies is on: an SQL body naming a missing table or function fails here.
_VALIDATE: LiteralString = """
SELECT CASE l.lanname
           WHEN 'sql' THEN pg_catalog.fmgr_sql_validator(p.oid)
           WHEN 'plpgsql' THEN pg_catalog.plpgsql_validator(p.oid)
       END
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
WHERE p.pronamespace = 'pgsched'::regnamespace AND p.proname = ANY(%(names)s)
"""


def _check_ledger(applied: dict[int, str], migrations: list[Migration]) -> None:
    known = {migration.version: migration for migration in migrations}
    newer = sorted(version for version in applied if version not in known)
    if newer:
        raise MigrationError(
            f"the database has schema version {max(newer)} but this pgsched only knows up to"
            f" {migrations[-1].version}; upgrade pgsched (never downgrade it past a migration)"
        )
    for version, checksum in applied.items():
        if known[version].checksum != checksum and checksum not in REVISED.get(version, ()):
            migration = known[version]
            raise MigrationError(
                f"migration {version:04d}_{migration.name} was applied with different contents;"
                " applied migrations must never be edited, add a new one instead"
            )
