"""Function files: every function of the schema kept whole in one file of sql/functions,
applied after the numbered migrations whenever its checksum changed, never redefined by a
numbered migration, and safe to apply under the previous release's running dispatchers."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import racers
from factories import database_at, schema_tool
from pgsched.db import connection, migrate

# The numbered migrations written before the function files: they define functions and are
# frozen (their checksums are in installed ledgers). Every later one holds tables, types
# and data only (docs/architecture.md, "Migrations").
LAST_MIGRATION_WITH_FUNCTIONS = 37


def _kept_function_named(sql: str) -> list[str]:
    """The functions kept in the function files that ``sql`` names (defines, calls,
    grants, attaches to a trigger)."""
    names = "|".join(function.name for function in migrate.function_files())
    return sorted(set(re.findall(rf"\bpgsched\.({names})\b", sql)))


def test_every_function_of_the_schema_is_kept_whole_in_the_file_named_after_it(conn):
    live = {
        row["proname"]
        for row in conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'pgsched'::regnamespace"
        )
    }
    files = migrate.function_files()
    assert {function.name for function in files} == live
    for function in files:
        defined = re.findall(r"CREATE OR REPLACE FUNCTION pgsched\.(\w+)\(", function.sql)
        assert defined and set(defined) == {function.name}, function.name
        assert function.sql.count("REVOKE ALL ON FUNCTION") == len(defined), (
            f"sql/functions/{function.name}.sql: every overload revokes PUBLIC's EXECUTE"
        )


def test_no_migration_after_the_frozen_ones_names_a_function_kept_in_the_files():
    """A numbered migration runs before the function files: one that redefined a kept
    function would be undone by its file, and one that called it would call the previous
    release's body (or none, on a fresh install)."""
    later = [m for m in migrate.available() if m.version > LAST_MIGRATION_WITH_FUNCTIONS]
    assert later, "the function files' ledger is a migration after the frozen ones"
    named = {
        f"{m.version:04d}_{m.name}": found for m in later if (found := _kept_function_named(m.sql))
    }
    assert named == {}, (
        f"{named}: a numbered migration must not define or call a function kept in"
        " sql/functions; edit that function's file instead (a changed contract: a new name)"
    )


def test_the_frozen_migrations_rule_catches_a_redefinition():
    """The rule above would fail on a migration that rewrites the claim, or a trigger's."""
    assert _kept_function_named(
        "CREATE OR REPLACE FUNCTION pgsched.claim_for_dispatch(batch_size integer)\n"
        "CREATE TRIGGER t AFTER UPDATE ON pgsched.job_runs"
        " EXECUTE FUNCTION pgsched.wake_dispatchers();"
    ) == ["claim_for_dispatch", "wake_dispatchers"]
    assert _kept_function_named("CREATE TABLE pgsched.claim_for_dispatch_log (id int);") == []


def test_a_migrated_database_applies_no_function_file_again(conn):
    assert migrate.migrate(conn).functions == []
    assert migrate.changed_functions(conn) == []


def test_a_function_file_whose_checksum_differs_is_applied_again_with_its_grants(conn):
    conn.execute("UPDATE pgsched.schema_functions SET checksum = 'x' WHERE name = 'heartbeat'")
    conn.execute("REVOKE EXECUTE ON FUNCTION pgsched.heartbeat(bigint, uuid) FROM pgsched_job")

    assert migrate.migrate(conn).functions == ["heartbeat"]

    [heartbeat] = [f for f in migrate.function_files() if f.name == "heartbeat"]
    row = conn.execute(
        "SELECT checksum,"
        " has_function_privilege('pgsched_job', 'pgsched.heartbeat(bigint, uuid)', 'EXECUTE')"
        "   AS job_may,"
        " EXISTS (SELECT FROM aclexplode(proacl) WHERE grantee = 0) AS public_may"
        " FROM pgsched.schema_functions, pg_proc"
        " WHERE name = 'heartbeat' AND oid = 'pgsched.heartbeat(bigint, uuid)'::regprocedure"
    ).fetchone()
    assert row == {"checksum": heartbeat.checksum, "job_may": True, "public_may": False}


def test_a_replaced_trigger_function_keeps_its_triggers(conn):
    triggers = "SELECT tgname FROM pg_trigger WHERE tgfoid = 'pgsched.wake_dispatchers'::regproc"
    before = conn.execute(triggers).fetchall()
    conn.execute(
        "UPDATE pgsched.schema_functions SET checksum = 'x' WHERE name = 'wake_dispatchers'"
    )

    assert migrate.migrate(conn).functions == ["wake_dispatchers"]
    assert before and conn.execute(triggers).fetchall() == before


def test_a_file_may_call_a_function_whose_file_sorts_after_it(conn):
    """adopt_lease (SQL: its body is checked when created) calls lease_is_genuine: with both
    missing, as two new functions of one release would be, the run still applies them."""
    conn.execute("DROP FUNCTION pgsched.adopt_lease, pgsched.lease_is_genuine")
    conn.execute(
        "DELETE FROM pgsched.schema_functions WHERE name IN ('adopt_lease', 'lease_is_genuine')"
    )

    assert migrate.migrate(conn).functions == ["adopt_lease", "lease_is_genuine"]
    row = conn.execute("SELECT pgsched.adopt_lease(1, gen_random_uuid(), gen_random_uuid()) AS ok")
    assert row.fetchone() == {"ok": False}


def test_a_function_body_that_names_a_missing_table_fails_the_run_and_records_nothing(conn):
    conn.execute("ALTER TABLE pgsched.lease_key RENAME TO lease_key_elsewhere")
    conn.execute(
        "UPDATE pgsched.schema_functions SET checksum = 'x' WHERE name = 'dispatch_channel'"
    )

    with pytest.raises(
        migrate.MigrationError, match=r'relation "pgsched\.lease_key" does not exist'
    ):
        migrate.migrate(conn)
    [recorded] = conn.execute(
        "SELECT checksum FROM pgsched.schema_functions WHERE name = 'dispatch_channel'"
    ).fetchall()
    assert recorded == {"checksum": "x"}


def test_pgsched_migrate_says_which_function_files_it_applied(conn, dsn):
    conn.execute("DELETE FROM pgsched.schema_functions WHERE name IN ('iso_utc', 'plural')")
    command = [sys.executable, "-m", "pgsched.cli.main", "migrate", "--dsn", dsn]

    pending = subprocess.run([*command, "--check"], capture_output=True, text=True)
    done = subprocess.run(command, capture_output=True, text=True)
    again = subprocess.run(command, capture_output=True, text=True)

    assert pending.returncode == 1
    assert "function files to apply: iso_utc, plural" in pending.stdout
    assert done.returncode == 0, done.stderr
    assert "(applied: none); function files applied: iso_utc, plural" in done.stdout
    assert "function files applied: none" in again.stdout


def test_an_upgrade_from_the_previous_release_under_its_running_dispatchers(postgres):
    """A database the previous release migrated (0037, every function from a numbered
    migration): four of its dispatchers claim and finish — the claim, the lock and lease
    functions by the signatures that release calls — while this release migrates under
    them and re-creates every function from its file. No run is lost or claimed twice, caps
    hold, and the schema ends as a fresh install's."""
    dsn = database_at(postgres, "function_files_upgrade", LAST_MIGRATION_WITH_FUNCTIONS)
    with connection.connect(dsn) as conn:
        racers.seed_queue(conn, definitions=100, runs_each=20)

    result = racers.race_the_migration(
        dsn,
        version=LAST_MIGRATION_WITH_FUNCTIONS,
        dispatcher=racers.dispatcher,
        seed=4000,
        total=100 * 20,
    )

    assert result.functions == [function.name for function in migrate.function_files()]
    tool = schema_tool()
    upgraded = tool.dump(postgres, "function_files_upgrade")
    assert tool.normalized(upgraded) == tool.normalized(tool.SCHEMA.read_text())
