"""Concurrency pools through the engine: limits, missing pools, fairness, changes, status."""

from __future__ import annotations

from datetime import timedelta

from factories import EPOCH, define
from pgsched.engine import dispatch, pools

NOW = EPOCH + timedelta(days=1)


def queue(conn, definition, *minutes_ago, trigger="manual"):
    """QUEUED runs of ``definition`` scheduled ``minutes_ago`` before NOW."""
    return [
        conn.execute(
            "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
            " request_token) VALUES (%s, 'QUEUED', %s, %s, %s) RETURNING id",
            [
                definition.id,
                trigger,
                NOW - timedelta(minutes=minutes),
                None if trigger == "schedule" else f"q-{minutes}",
            ],
        ).fetchone()["id"]
        for minutes in minutes_ago
    ]


def running(conn):
    return conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE status = 'RUNNING'"
    ).fetchone()["n"]


def finish_all(conn):
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'COMPLETED', finished_at = %s"
        " WHERE status = 'RUNNING'",
        [NOW],
    )


def test_a_pool_at_its_limit_holds_runs_oldest_first_across_its_jobs(conn):
    pools.upsert(conn, "default", "warehouse", 2)
    a = define(conn, "a", pool="warehouse", maxConcurrentRuns=5)
    b = define(conn, "b", pool="warehouse", maxConcurrentRuns=5)
    outside = define(conn, "outside", maxConcurrentRuns=5)
    old_a, young_a = queue(conn, a, 50, 10)
    [old_b] = queue(conn, b, 30)
    free = queue(conn, outside, 40, 20)

    first = dispatch.claim(conn, now=NOW)

    # The pool's two oldest runs (a 50 min, b 30 min), and every run outside the pool.
    assert {run.id for run in first.claimed} == {old_a, old_b, *free}
    assert first.at_cap == {a.id}  # held back by the pool's limit
    finish_all(conn)
    assert [run.id for run in dispatch.claim(conn, now=NOW).claimed] == [young_a]


def test_a_limit_change_applies_at_the_next_claim(conn):
    pools.upsert(conn, "default", "warehouse", 1)
    job = define(conn, "a", pool="warehouse", maxConcurrentRuns=10)
    queue(conn, job, 5, 4, 3, 2)
    assert len(dispatch.claim(conn, now=NOW).claimed) == 1

    pools.upsert(conn, "default", "warehouse", 3)
    assert len(dispatch.claim(conn, now=NOW).claimed) == 2
    assert running(conn) == 3

    pools.upsert(conn, "default", "warehouse", 1)  # lowering stops nothing that runs
    assert dispatch.claim(conn, now=NOW).claimed == []
    assert running(conn) == 3


def test_runs_of_a_job_naming_a_missing_or_deleted_pool_wait(conn):
    job = define(conn, "a", pool="warehouse", concurrencyPolicy="Skip")
    queue(conn, job, 5, trigger="schedule")

    assert dispatch.claim(conn, now=NOW).claimed == []  # no such pool (yet)
    pools.upsert(conn, "default", "warehouse", 1)
    assert len(dispatch.claim(conn, now=NOW).claimed) == 1
    finish_all(conn)

    pools.delete(conn, "default", "warehouse")
    queue(conn, job, 1, trigger="schedule")
    result = dispatch.claim(conn, now=NOW)
    assert result.claimed == [] and result.skipped == []  # waits, is not skipped
    assert [s.limit for s in pools.stats(conn, now=NOW)] == [None]


def test_a_skip_job_at_the_pool_limit_is_skipped_naming_the_pool(conn):
    pools.upsert(conn, "default", "warehouse", 1)
    busy = define(conn, "busy", pool="warehouse")
    skipper = define(conn, "skipper", pool="warehouse", concurrencyPolicy="Skip")
    queue(conn, busy, 10)
    [late] = queue(conn, skipper, 5, trigger="schedule")

    result = dispatch.claim(conn, now=NOW)

    assert result.skipped == [late]
    row = conn.execute("SELECT * FROM pgsched.job_runs WHERE id = %s", [late]).fetchone()
    assert (row["status"], row["reason"]) == ("SKIPPED", "ConcurrencyPolicy")
    assert "the pool warehouse was at its limit of 1" in row["error"]


def test_pools_are_per_namespace_and_stats_count_running_and_queued(conn):
    pools.upsert(conn, "team-a", "warehouse", 1)
    pools.upsert(conn, "team-b", "warehouse", 1)
    a = define(conn, "a", namespace="team-a", pool="warehouse")
    b = define(conn, "b", namespace="team-b", pool="warehouse")
    queue(conn, a, 3, 2)
    queue(conn, b, 1)

    assert len(dispatch.claim(conn, now=NOW).claimed) == 2  # one in each namespace

    stats = {(s.namespace, s.name): s for s in pools.stats(conn, now=NOW)}
    assert stats[("team-a", "warehouse")] == pools.PoolStats("team-a", "warehouse", 1, 1, 1, 1)
    assert stats[("team-b", "warehouse")] == pools.PoolStats("team-b", "warehouse", 1, 1, 0, 1)
    assert pools.members(conn, "team-a", "warehouse") == [a.id]


def test_a_member_refresh_is_forgotten_only_for_the_request_it_served(conn):
    # A refresh that began before the pool changed again must not forget the newer request:
    # that change's refresh is still to come (k8s/kinds/concurrencypools.py).
    assert pools.member_refresh_requested(conn, "team-a", "licence") is None
    pools.request_member_refresh(conn, "team-a", "licence")
    first = pools.member_refresh_requested(conn, "team-a", "licence")
    pools.request_member_refresh(conn, "team-a", "licence")
    second = pools.member_refresh_requested(conn, "team-a", "licence")
    assert first is not None and second is not None and second != first
    assert pools.member_refresh_requested(conn, "team-b", "licence") is None

    pools.forget_member_refresh(conn, "team-a", "licence", first)
    assert pools.member_refresh_requested(conn, "team-a", "licence") == second
    pools.forget_member_refresh(conn, "team-a", "licence", second)
    assert pools.member_refresh_requested(conn, "team-a", "licence") is None
