"""Versioned schema migrations: plain SQL files applied in order, recorded in a ledger.

``pgsched/sql/migrations/NNNN_name.sql`` are applied in version order, each in its own
transaction together with its ledger row (``pgsched.schema_migrations``), so a migration is
either fully applied and recorded or not at all.

Several operator replicas start at once and all try to migrate: each migration's transaction
first locks the ledger table, so a second replica waits, then finds that migration applied
and goes on to the next.
A migration file that changed after it was applied, or a database newer than this code,
stops the run with an explanation instead of guessing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
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
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class MigrateResult:
    applied: list[int]
    current: int


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
    return MigrateResult(applied=done, current=migrations[-1].version)


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
    try:
        with conn.transaction():
            # Migrating processes queue on the ledger's table lock, which only roles with
            # privileges on the ledger can take: an advisory lock, any login could hold
            # (docs/architecture.md, "Locks no tenant can take").
            conn.execute("LOCK TABLE pgsched.schema_migrations IN SHARE ROW EXCLUSIVE MODE")
            if conn.execute(
                "SELECT 1 FROM pgsched.schema_migrations WHERE version = %s", [migration.version]
            ).fetchone():
                return False
            log.info("applying migration %04d_%s", migration.version, migration.name)
            conn.execute(migration.sql)
            conn.execute(
                "INSERT INTO pgsched.schema_migrations (version, name, checksum)"
                " VALUES (%s, %s, %s)",
                [migration.version, migration.name, migration.checksum],
            )
        return True
    except psycopg.Error as error:
        raise MigrationError(
            f"migration {migration.version:04d}_{migration.name} failed and was rolled"
            f" back: {error}"
        ) from error


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
