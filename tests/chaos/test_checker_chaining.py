"""The chaos checker's chaining invariant (I10) can fail: plant each violation from the
test side — a lost downstream run, a doubled one, one without a final upstream, a fan-in
run that fired early — and I10 reports it. A short database test, not a chaos run."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

import invariants
from chaos import checker
from chaos.sampler import Sampled
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, lease, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NEVER = "0 0 1 1 *"


def complete(conn, job, token, status="COMPLETED", *, at=T0):
    runs.run_now(conn, job.id, token=token, scheduled_for=at)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed
    assert lease.finish(
        conn, lease.Lease(run.id, run.lease_token), status, reason="NonZeroExit", now=at
    )
    settle.run_once(conn, now=at + timedelta(seconds=1), rng=random.Random(1))
    return run


@pytest.fixture(autouse=True)
def audited(conn):
    invariants.install_run_audit(conn)  # the checker's I4/I5 read it


@pytest.fixture
def chain(conn):
    extract = define(conn, "extract", schedule=NEVER, now=T0 - timedelta(hours=1))
    load = define(conn, "load", after=[{"scheduledJob": "extract"}], now=T0 - timedelta(hours=1))
    upstream = complete(conn, extract, "a")
    return extract, load, upstream


def i10(conn):
    return checker.check(conn, Sampled(), launches=[], slack_seconds=5)["I10"]


def test_i10_holds_for_a_correct_chain(conn, chain):
    assert i10(conn) == []


def test_i10_catches_a_lost_downstream_run(conn, chain):
    _, load, upstream = chain
    conn.execute("DELETE FROM pgsched.job_runs WHERE definition_id = %s", [load.id])
    assert i10(conn) == [
        f"upstream run {upstream.id} → load: 0 downstream runs, expected exactly 1"
    ]


def test_i10_catches_a_doubled_downstream_run(conn, chain):
    _, load, upstream = chain
    # A raw insert, past the chain lock and the NOT EXISTS that keep chaining exactly once.
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " upstream_run_id) VALUES (%s, 'QUEUED', 'upstream', %s, %s)",
        [load.id, T0, upstream.id],
    )
    assert i10(conn) == [
        f"upstream run {upstream.id} → load: 2 downstream runs, expected exactly 1"
    ]


def test_i10_catches_a_downstream_run_for_an_attempt_that_is_retried(conn):
    flaky = define(
        conn,
        "flaky",
        schedule=NEVER,
        retryPolicy={"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 1, "jitter": 0}},
        now=T0 - timedelta(hours=1),
    )
    alert = define(
        conn,
        "alert",
        after=[{"scheduledJob": "flaky", "outcome": "Failed"}],
        now=T0 - timedelta(hours=1),
    )
    failed = complete(conn, flaky, "a", "FAILED")
    # A settle variant that chains before deciding the retry (planted from the test side).
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " upstream_run_id) VALUES (%s, 'QUEUED', 'upstream', %s, %s)",
        [alert.id, T0, failed.id],
    )
    [problem] = invariants.chained_exactly_once(conn)
    assert f"names upstream run {failed.id}, which is not a final matching outcome" in problem


def test_i10_catches_a_fan_in_run_that_fired_before_every_upstream_arrived(conn):
    a = define(conn, "a", schedule=NEVER, now=T0 - timedelta(hours=1))
    define(conn, "b", schedule=NEVER, now=T0 - timedelta(hours=1))
    join = define(
        conn,
        "join",
        after=[{"scheduledJob": "a"}, {"scheduledJob": "b"}],
        afterMode="All",
        now=T0 - timedelta(hours=1),
    )
    upstream = complete(conn, a, "a")
    # A fan-in variant that counts one arrival as the whole set.
    [row] = conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " upstream_run_id) VALUES (%s, 'QUEUED', 'upstream', %s, %s) RETURNING id",
        [join.id, T0, upstream.id],
    ).fetchall()
    conn.execute("UPDATE pgsched.chain_arrivals SET consumed_by = %s", [row["id"]])
    assert i10(conn) == [f"fan-in run {row['id']} of join consumed arrivals of only 1 upstreams"]
