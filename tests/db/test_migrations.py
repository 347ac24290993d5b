"""Migrations: ordered, recorded, safe from many replicas at once, and never silently edited."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import psycopg
import pytest

from devenv.postgres import PostgresServer
from factories import database_at, job_login
from pgsched.db import connection, migrate
from pgsched.engine.reap import RUN_API_GAP


def _migrate(dsn: str) -> list[int]:
    with connection.connect(dsn) as conn:
        return migrate.migrate(conn).applied


def fresh_database(postgres: PostgresServer, name: str) -> str:
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    return postgres.dsn(name)


def test_eight_replicas_migrating_at_once_apply_each_migration_exactly_once(postgres):
    dsn = fresh_database(postgres, "migrate_race")
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        results = pool.map(_migrate, [dsn] * 8)
    applied = sorted(version for result in results for version in result)
    assert applied == [migration.version for migration in migrate.available()]
    with connection.connect(dsn) as conn:
        assert migrate.current_version(conn) == migrate.latest_version()


def test_a_long_transaction_in_another_database_does_not_hold_up_a_fresh_install(postgres):
    """Migration 0030 waits for old transactions of roles that may claim: only in its own
    database. Before, a superuser's transaction open in any other database of the server
    (a shared server, another application) failed a fresh install after 60 s."""
    dsn = fresh_database(postgres, "migrate_shared_server")
    with psycopg.connect(postgres.dsn()) as elsewhere:  # not autocommit
        elsewhere.execute("SELECT 1")  # a transaction open in the database "postgres"
        started = time.monotonic()
        assert _migrate(dsn) == [migration.version for migration in migrate.available()]
        assert time.monotonic() - started < 30
        elsewhere.rollback()


def test_a_database_migrated_with_a_revised_migrations_earlier_text_is_accepted(dsn, conn):
    """0030's text was revised after release (its wait narrowed to this database); a
    database that applied the earlier text is as current as one that applied the new."""
    [earlier] = migrate.REVISED[30]
    conn.execute("UPDATE pgsched.schema_migrations SET checksum = %s WHERE version = 30", [earlier])
    assert migrate.migrate(conn).applied == []
    conn.execute("UPDATE pgsched.schema_migrations SET checksum = 'x' WHERE version = 30")
    with pytest.raises(migrate.MigrationError, match="0030_claim_locks_rows_only was applied"):
        migrate.migrate(conn)


def test_an_edited_applied_migration_stops_the_run(dsn, conn):
    conn.execute("UPDATE pgsched.schema_migrations SET checksum = 'x' WHERE version = 1")
    with pytest.raises(migrate.MigrationError, match="applied with different contents"):
        migrate.migrate(conn)


def test_a_database_newer_than_the_code_is_refused(dsn, conn):
    conn.execute(
        "INSERT INTO pgsched.schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')"
    )
    with pytest.raises(migrate.MigrationError, match=r"schema version 999 .* upgrade pgsched"):
        migrate.migrate(conn)


def test_a_database_without_a_function_this_code_calls_is_refused_until_migrated(dsn, conn):
    """A release that changes only sql/functions has no new version number: the preflight
    (the operator's start, doctor) compares the function ledger too."""
    from pgsched.db import preflight

    conn.execute("DROP FUNCTION pgsched.cannot_start(uuid, timestamptz, text[])")
    conn.execute("DELETE FROM pgsched.schema_functions WHERE name = 'cannot_start'")
    [schema] = [check for check in preflight.run(conn) if check.name == "schema"]
    assert not schema.ok
    assert "its SQL functions are not this pgsched's (cannot_start)" in schema.detail
    assert "run `pgsched migrate`" in schema.detail
    migrate.migrate(conn)
    [schema] = [check for check in preflight.run(conn) if check.name == "schema"]
    assert schema.ok, schema.detail


def test_cli_migrate_reports_the_version_and_check_mode(postgres):
    dsn = fresh_database(postgres, "migrate_cli")
    command = [sys.executable, "-m", "pgsched.cli.main"]
    pending = subprocess.run(
        [*command, "migrate", "--check", "--dsn", dsn], capture_output=True, text=True
    )
    assert pending.returncode == 1 and "schema version 0" in pending.stdout
    done = subprocess.run([*command, "migrate", "--dsn", dsn], capture_output=True, text=True)
    assert done.returncode == 0 and "schema at version" in done.stdout
    again = subprocess.run(
        [*command, "migrate", "--check", "--dsn", dsn], capture_output=True, text=True
    )
    assert again.returncode == 0


def test_cli_migrate_explains_an_unreachable_database():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgsched.cli.main",
            "migrate",
            "--dsn",
            "host=127.0.0.1 port=1 user=x dbname=x",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "cannot connect to the database" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_migrate_reads_the_connection_string_from_the_file_the_chart_mounts(postgres, tmp_path):
    dsn = fresh_database(postgres, "migrate_file")
    path = tmp_path / "dsn"
    path.write_text(dsn + "\n")
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("PGSCHED_DSN")
    }
    command = [sys.executable, "-m", "pgsched.cli.main", "migrate"]

    done = subprocess.run(
        command, capture_output=True, text=True, env={**environment, "PGSCHED_DSN_FILE": str(path)}
    )
    path.write_text("  \n")
    empty = subprocess.run(
        command, capture_output=True, text=True, env={**environment, "PGSCHED_DSN_FILE": str(path)}
    )

    assert done.returncode == 0 and "schema at version" in done.stdout, done.stderr
    assert empty.returncode == 2
    assert f"PGSCHED_DSN_FILE: '{path}' is empty; it must hold a libpq connection string" in (
        empty.stderr
    )
    assert "Traceback" not in empty.stderr


def _plan(conn, query: str, params: dict) -> str:
    rows = conn.execute(f"EXPLAIN {query}", params).fetchall()
    return "\n".join(row["QUERY PLAN"] for row in rows)


def _uses(conn, plan: str, index: str) -> bool:
    """Whether ``plan`` scans ``index`` or one of its partitions (job_runs is partitioned,
    migration 0012: each partition has its own copy, named after the partition)."""
    names = conn.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [f"pgsched.{index}"],
    ).fetchall()
    return any(f" {row['relname']} " in f"{plan} " for row in names) or f" {index} " in plan


def test_claim_and_reap_queries_use_their_partial_indexes_with_a_large_history(conn):
    from pgsched.db import queries

    conn.execute(
        "INSERT INTO pgsched.job_definitions (id, namespace, name, schedule_kind, schedule, anchor)"
        " SELECT gen_random_uuid(), 'bench', 'def-' || g, 'cron', '* * * * *', now()"
        " FROM generate_series(1, 100) g"
    )
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, finished_at, settled_at)"
        " SELECT d.id, 'COMPLETED', 'manual', now() - g * interval '1 second', now(), now()"
        " FROM generate_series(1, 200000) g"
        " JOIN LATERAL (SELECT id FROM pgsched.job_definitions OFFSET g % 100 LIMIT 1) d ON true"
    )
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for)"
        " SELECT id, 'QUEUED', 'manual', now() FROM pgsched.job_definitions"
    )
    conn.execute("ANALYZE pgsched.job_runs")
    claim = _plan(
        conn,
        queries.get("claim_candidates").as_string(conn),
        {"now": None, "limit": 200, "definition_ids": None},
    )
    assert _uses(conn, claim, "job_runs_queued"), claim
    reap = _plan(
        conn,
        queries.get("reap_stale_heartbeats").as_string(conn),
        {"now": datetime.now(UTC), "api_gap": RUN_API_GAP},
    )
    assert _uses(conn, reap, "job_runs_running"), reap
    settle = _plan(conn, queries.get("unsettled_runs").as_string(conn), {"limit": 500})
    assert _uses(conn, settle, "job_runs_unsettled"), settle


def test_claim_locks_leave_their_advisory_half_once_older_transactions_ended(postgres):
    """0027 kept the advisory keys beside the claim's row locks for the previous release's
    calls in flight; 0030 drops them only when every transaction that began before it, of
    a role that may claim, has ended, and a job login's transaction never holds it up."""
    dsn = database_at(postgres, "claim_lock_handover", 29)
    with connection.connect(dsn) as admin:
        user, job_dsn = job_login(admin, dsn)
    with connection.connect(job_dsn) as job, connection.connect(dsn) as older:
        job.execute("BEGIN")
        job.execute("SELECT 1")  # a transaction held open for as long as the job likes
        older.execute("BEGIN")
        older.execute("SELECT 1")  # as a claim in flight would be
        migrating = multiprocessing.get_context("spawn").Pool(1)
        applied = migrating.apply_async(_migrate, [dsn])
        with pytest.raises(multiprocessing.TimeoutError):
            applied.get(timeout=2)  # waiting for the older transaction, not the job's
        older.execute("COMMIT")
        assert applied.get(timeout=10)[0] == 30  # then any later migration
        migrating.close()
        job.execute("COMMIT")
    with connection.connect(dsn) as conn:
        body = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE oid ="
            " 'pgsched.lock_claim_keys(text, text[], text)'::regprocedure"
        ).fetchone()["prosrc"]
        assert "advisory" not in body
        conn.execute(f"DROP OWNED BY {user}")
        conn.execute(f"DROP ROLE {user}")
