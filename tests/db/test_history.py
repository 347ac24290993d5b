"""Run history partitioned by month (migration 0012, engine/history.py): the move of an
existing installation, a rolling upgrade across it, months created ahead, retention."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import racers
from factories import database_at
from pgsched.db import connection, migrate
from pgsched.engine import dispatch, history, runs

NOW = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)


def test_rolling_upgrade_dispatchers_of_the_previous_release_race_the_migration(postgres):
    """Four dispatchers of the release before 0012 (its claim function and fenced finish,
    unchanged since 0010) claim and finish while the new release migrates the table under
    them: no run is lost or claimed twice, and leases taken before the move are finished
    after it."""
    dsn = database_at(postgres, "history_upgrade", 11)
    with connection.connect(dsn) as conn:
        racers.seed_queue(conn, definitions=100, runs_each=20)

    racers.race_the_migration(
        dsn, version=11, dispatcher=racers.release_0011_dispatcher, seed=2000, total=100 * 20
    )

    with connection.connect(dsn) as conn:
        partitioned = conn.execute(
            "SELECT relkind FROM pg_class WHERE oid = 'pgsched.job_runs'::regclass"
        ).fetchone()
        assert partitioned["relkind"] == "p"


def test_rolling_upgrade_dispatchers_race_the_claim_pruning_migration(postgres):
    """Four dispatchers of the release before 0015 (the same dispatcher, calling
    claim_for_dispatch by the same signature) claim and finish over a year of partitions
    while 0015 replaces the function's body and indexes job_runs under them: no run is lost
    or claimed twice, caps hold across the swap."""
    dsn = database_at(postgres, "claim_pruning_upgrade", 14)
    with connection.connect(dsn) as conn:
        history.run_once(conn, retention=None)
        month = history.month_of(history.partition_name(datetime.now(UTC)))
        for _ in range(12):
            month = history.add_months(month, -1)
            conn.execute("SELECT pgsched.create_run_partition(%s)", [month])
        racers.seed_queue(conn, definitions=100, runs_each=20)

    racers.race_the_migration(
        dsn, version=14, dispatcher=racers.dispatcher, seed=3000, total=100 * 20
    )


def test_the_migration_keeps_every_row_id_and_lease_and_new_ids_continue(postgres):
    dsn = database_at(postgres, "history_move", 11)
    with connection.connect(dsn) as conn:
        racers.seed_queue(conn, definitions=3, runs_each=4)
        conn.execute(
            "UPDATE pgsched.job_runs SET status = 'RUNNING', lease_token = gen_random_uuid(),"
            " started_at = now() WHERE id % 3 = 0"
        )
        conn.execute(
            "UPDATE pgsched.job_runs SET scheduled_for = scheduled_for - interval '200 days'"
            " WHERE id % 2 = 0"
        )
        before = conn.execute("SELECT * FROM pgsched.job_runs ORDER BY id").fetchall()
        migrate.migrate(conn)
        after = conn.execute("SELECT * FROM pgsched.job_runs ORDER BY id").fetchall()
        assert after == before
        months = conn.execute(
            "SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'pgsched.job_runs'::regclass"
        ).fetchone()
        assert months["n"] >= 3  # two months of rows (or three) and the default partition
        definition = before[0]["definition_id"]
        fresh = runs.run_now(conn, definition, token="after-the-move")
        assert fresh.run.id == max(row["id"] for row in before) + 1


def test_months_are_created_ahead_and_take_their_rows_out_of_the_default(conn):
    racers.seed_queue(conn, definitions=1, runs_each=0)
    definition = conn.execute("SELECT id FROM pgsched.job_definitions").fetchone()["id"]
    queued = runs.run_now(conn, definition, token="t1", scheduled_for=NOW + timedelta(days=40))
    assert _partition_of(conn, queued.run.id) == "job_runs_default"

    result = history.run_once(conn, retention=None, now=NOW)

    assert result.created == ["job_runs_y2026m12", "job_runs_y2027m01", "job_runs_y2027m02"]
    assert result.moved == 1
    assert _partition_of(conn, queued.run.id) == "job_runs_y2027m01"
    again = runs.run_now(conn, definition, token="t1")
    assert not again.created and again.run.id == queued.run.id  # the token still holds
    assert history.run_once(conn, retention=None, now=NOW).created == []


def test_retention_drops_expired_months_whole_and_keeps_one_with_a_live_run(conn):
    racers.seed_queue(conn, definitions=1, runs_each=0)
    definition = conn.execute("SELECT id FROM pgsched.job_definitions").fetchone()["id"]
    for month in ("2026-05-01", "2026-06-01", "2026-07-01", "2026-11-01"):
        conn.execute("SELECT pgsched.create_run_partition(%s::timestamptz)", [month])
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " finished_at, settled_at)"
        " SELECT %s, 'COMPLETED', 'schedule', m + g * interval '1 hour', m, m"
        " FROM unnest(ARRAY['2026-05-01', '2026-06-01', '2026-07-01', '2026-11-01',"
        "                   '2026-01-01']::timestamptz[]) AS m, generate_series(1, 50) AS g",
        [definition],
    )
    live = runs.run_now(
        conn, definition, token="old", scheduled_for=datetime(2026, 6, 20, tzinfo=UTC)
    )
    consumer = conn.execute(
        "SELECT id FROM pgsched.job_runs_y2026m05 ORDER BY id LIMIT 1"
    ).fetchone()["id"]
    conn.execute(
        "INSERT INTO pgsched.chain_arrivals (downstream_id, upstream_name, upstream_run_id,"
        " consumed_by) VALUES (%s, 'up', %s, %s)",
        [definition, consumer, consumer],
    )

    result = history.run_once(conn, retention=timedelta(days=90), now=NOW)

    # Months that ended before 2026-09-16: May and July go, June holds a QUEUED run.
    assert result.dropped == ["job_runs_y2026m05", "job_runs_y2026m07"]
    assert result.kept == ["job_runs_y2026m06"]
    assert result.pruned == 50  # January's runs, in the default partition
    assert racers.count_runs(conn) == 50 + 50 + 1  # June's and November's
    assert racers.count_runs(conn, f"id = {live.run.id} AND status = 'QUEUED'") == 1
    arrivals = conn.execute("SELECT count(*) AS n FROM pgsched.chain_arrivals").fetchone()
    assert arrivals["n"] == 0

    runs.cancel_run(conn, live.run.id, by=runs.BY_CLI)
    conn.execute("UPDATE pgsched.job_runs SET settled_at = now() WHERE id = %s", [live.run.id])
    assert history.run_once(conn, retention=timedelta(days=90), now=NOW).dropped == [
        "job_runs_y2026m06"
    ]


def _partition_of(conn, run_id: int) -> str:
    row = conn.execute(
        "SELECT tableoid::regclass::text AS part FROM pgsched.job_runs WHERE id = %s", [run_id]
    ).fetchone()
    return str(row["part"]).removeprefix("pgsched.")


def test_a_drop_that_cannot_get_its_lock_soon_gives_way_and_is_retried(dsn, conn):
    """A long query on job_runs holds off the drop and the creation of months: each
    waits at most LOCK_WAIT (so no claim queues behind it for longer), and the next round
    does what this one could not."""
    racers.seed_queue(conn, definitions=1, runs_each=0)
    conn.execute("SELECT pgsched.create_run_partition('2026-05-01'::timestamptz)")
    with connection.connect(dsn) as reader, reader.transaction():
        reader.execute("SELECT count(*) FROM pgsched.job_runs").fetchone()
        started = time.monotonic()
        held_off = history.run_once(conn, retention=timedelta(days=90), now=NOW)
        waited = time.monotonic() - started
    assert held_off.kept == ["job_runs_y2026m05"] and held_off.dropped == []
    assert held_off.busy == ["job_runs_y2026m12", "job_runs_y2027m01", "job_runs_y2027m02"]
    assert held_off.created == []
    assert waited < 4 * history.LOCK_WAIT.total_seconds() + 2
    later = history.run_once(conn, retention=timedelta(days=90), now=NOW)
    assert later.dropped == ["job_runs_y2026m05"] and later.created == held_off.busy


def _expired_may(conn) -> None:
    """One definition and May 2026 as a month of 50 settled runs (expired at NOW, 90 days)."""
    racers.seed_queue(conn, definitions=1, runs_each=0)
    definition = conn.execute("SELECT id FROM pgsched.job_definitions").fetchone()["id"]
    conn.execute("SELECT pgsched.create_run_partition('2026-05-01'::timestamptz)")
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " finished_at, settled_at)"
        " SELECT %s, 'COMPLETED', 'schedule', m, m, m"
        " FROM generate_series('2026-05-01'::timestamptz, '2026-05-03', interval '1 hour')"
        " AS m LIMIT 50",
        [definition],
    )


def _table(conn, name: str) -> str | None:
    row = conn.execute("SELECT to_regclass(%s)::text AS t", [f"pgsched.{name}"]).fetchone()
    return row["t"]


def test_an_expired_month_s_files_are_removed_without_holding_up_job_runs(dsn, conn):
    """Removing a dropped month's files takes seconds for gigabytes, and PostgreSQL does it
    at commit, before it releases the transaction's locks. The month is detached under
    job_runs' lock and dropped in a transaction of its own: while that one is open (its
    files not removed yet), runs are queued, read and claimed as usual."""
    _expired_may(conn)
    definition = conn.execute("SELECT id FROM pgsched.job_definitions").fetchone()["id"]
    detached = conn.execute(
        "SELECT pgsched.detach_run_partition('job_runs_y2026m05', '200 ms') AS outcome"
    ).fetchone()
    assert detached["outcome"] == "detached"
    assert racers.count_runs(conn) == 0  # May's runs are out of job_runs, in their own table
    assert _table(conn, "expired_job_runs_y2026m05") is not None
    with connection.connect(dsn) as dropper, dropper.transaction():
        dropped = dropper.execute(
            "SELECT pgsched.drop_expired_run_month('expired_job_runs_y2026m05', '200 ms')"
            " AS outcome"
        ).fetchone()
        assert dropped["outcome"] == "dropped"
        with connection.connect(dsn) as claimer:
            claimer.execute("SET lock_timeout = '1s'")
            queued = runs.run_now(claimer, definition, token="during-the-drop")
            [claimed] = dispatch.claim(claimer).claimed
            assert claimed.id == queued.run.id
            assert racers.count_runs(claimer, f"id = {queued.run.id} AND status = 'RUNNING'") == 1
    assert _table(conn, "expired_job_runs_y2026m05") is None


@pytest.mark.parametrize("retention", [timedelta(days=90), None], ids=["kept", "turned-off"])
def test_a_month_detached_but_not_dropped_is_dropped_at_the_next_round(conn, retention):
    """A crash between the detach and the drop leaves the detached table; the next round
    drops it and reports the month dropped — also if the retention was turned off since:
    the month is out of the history already, its table is only disk."""
    _expired_may(conn)
    conn.execute("SELECT pgsched.detach_run_partition('job_runs_y2026m05', '200 ms')")

    result = history.run_once(conn, retention=retention, now=NOW)

    assert result.dropped == ["job_runs_y2026m05"] and result.kept == []
    assert _table(conn, "expired_job_runs_y2026m05") is None
    assert _table(conn, "job_runs_y2026m05") is None


def test_dropping_an_expired_month_refuses_any_other_table(conn):
    try:
        conn.execute("SELECT pgsched.drop_expired_run_month('job_definitions', '200 ms')")
    except psycopg.errors.InvalidParameterValue as error:
        assert "expired_job_runs_y2026m08" in str(error)  # the error shows a right name
    else:
        raise AssertionError("drop_expired_run_month dropped a table that is not a month")
    assert _table(conn, "job_definitions") is not None


def test_a_vacuum_of_another_month_does_not_hold_off_the_drop(dsn, conn):
    """Autovacuum on the current month (a long one, on a large month) holds its SHARE
    UPDATE EXCLUSIVE lock; it yields to a waiter only after deadlock_timeout (1 s), longer
    than the drop waits. The drop locks job_runs itself and the expired month, not the
    other months, so it goes ahead."""
    _expired_may(conn)
    conn.execute("SELECT pgsched.create_run_partition('2026-12-01'::timestamptz)")
    with connection.connect(dsn) as vacuum, vacuum.transaction():
        vacuum.execute("LOCK TABLE pgsched.job_runs_y2026m12 IN SHARE UPDATE EXCLUSIVE MODE")
        result = history.run_once(conn, retention=timedelta(days=90), now=NOW)
    assert result.dropped == ["job_runs_y2026m05"] and result.kept == []


def test_the_previous_release_s_drop_still_drops_a_month_in_one_call(conn):
    """During a rolling upgrade the previous release's history service calls
    drop_run_partition: it detaches and drops the month in one transaction, as it did."""
    _expired_may(conn)
    dropped = conn.execute(
        "SELECT pgsched.drop_run_partition('job_runs_y2026m05', '200 ms') AS outcome"
    ).fetchone()
    assert dropped["outcome"] == "dropped"
    assert _table(conn, "job_runs_y2026m05") is None
    assert _table(conn, "expired_job_runs_y2026m05") is None
    assert racers.count_runs(conn) == 0
    again = conn.execute(
        "SELECT pgsched.drop_run_partition('job_runs_y2026m05', '200 ms') AS outcome"
    ).fetchone()
    assert again["outcome"] == "gone"


def test_finish_by_marks_of_dropped_months_go_with_them(conn):
    racers.seed_queue(conn, definitions=1, runs_each=0)
    definition = conn.execute("SELECT id FROM pgsched.job_definitions").fetchone()["id"]
    for month in ("2026-05-01", "2026-11-01"):
        conn.execute("SELECT pgsched.create_run_partition(%s::timestamptz)", [month])
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " finished_at, settled_at)"
        " SELECT %s, 'COMPLETED', 'schedule', m, m, m"
        " FROM unnest(ARRAY['2026-05-01', '2026-11-01']::timestamptz[]) AS m",
        [definition],
    )
    conn.execute(
        "INSERT INTO pgsched.run_deadlines (run_id, deadline_at, missed_at)"
        " SELECT id, scheduled_for, scheduled_for FROM pgsched.job_runs"
    )
    assert history.run_once(conn, retention=timedelta(days=90), now=NOW).dropped == [
        "job_runs_y2026m05"
    ]
    kept = conn.execute(
        "SELECT r.scheduled_for FROM pgsched.run_deadlines AS m"
        " JOIN pgsched.job_runs AS r ON r.id = m.run_id"
    ).fetchall()
    assert [row["scheduled_for"].month for row in kept] == [11]
    assert conn.execute("SELECT count(*) AS n FROM pgsched.run_deadlines").fetchone()["n"] == 1
