"""spec.jitterSeconds: each occurrence's start delayed by a bounded, deterministic amount."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from factories import RecordingLauncher, define, runs_of
from pgsched import wording
from pgsched.engine import dispatch, jitter, materialize, runs, waits
from pgsched.spec import SpecError

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
SPREAD = 300


def test_a_thousand_occurrences_are_delayed_within_bounds_and_spread_evenly():
    job = uuid.uuid4()
    instants = [datetime(2026, 6, 1, tzinfo=UTC) + timedelta(minutes=i) for i in range(1000)]
    delays = [jitter.delay(job, at, seconds=SPREAD).total_seconds() for at in instants]

    assert all(0 <= seconds <= SPREAD for seconds in delays)
    mean = sum(delays) / len(delays)
    # Uniform on [0, 300]: mean 150, standard error 300 / sqrt(12 * 1000) = 2.7.
    assert abs(mean - SPREAD / 2) < 4 * 2.74, mean
    # Coarse uniformity: ten equal bins, chi-square with 9 degrees of freedom; 27.9 is its
    # 0.999 quantile (a correct generator fails one run in a thousand, and the inputs are fixed).
    bins = [0] * 10
    for seconds in delays:
        bins[min(int(seconds / SPREAD * 10), 9)] += 1
    chi_square = sum((count - 100) ** 2 / 100 for count in bins)
    assert chi_square < 27.9, bins
    # Different jobs at one instant are spread too (no fleet moves in lockstep).
    at = instants[0]
    assert len({jitter.delay(uuid.uuid4(), at, seconds=SPREAD) for _ in range(50)}) > 45


def test_the_delay_is_the_same_on_every_recomputation():
    job = uuid.uuid4()
    at = datetime(2026, 6, 1, 9, tzinfo=UTC)
    first = jitter.delay(job, at, seconds=SPREAD)
    assert jitter.delay(job, at.astimezone(), seconds=SPREAD) == first  # any offset, same instant
    assert jitter.delay(uuid.UUID(str(job)), at, seconds=SPREAD) == first
    assert jitter.delay(job, at, seconds=0) == timedelta(0)


def test_materialized_runs_keep_the_occurrence_and_record_the_jittered_start(conn):
    job = define(conn, schedule="* * * * *", jitterSeconds=SPREAD, now=T0)
    materialize.run_once(conn, now=T0 + timedelta(minutes=1))
    [row] = runs_of(conn, job)
    at = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)
    assert row["scheduled_for"] == at
    assert runs.get(conn, row["id"]).not_before == at + jitter.delay(job.id, at, seconds=SPREAD)


def test_a_restart_materializing_again_does_not_reroll(conn, postgres):
    """Two leaders (or a restart that lost the advance) materialize the same occurrence:
    one row, whose jittered start is the one any replica computes."""
    job = define(conn, schedule="* * * * *", jitterSeconds=SPREAD, now=T0)
    at = T0 + timedelta(minutes=1)
    materialize.run_once(conn, now=at)
    before = [runs.get(conn, row["id"]).not_before for row in runs_of(conn, job)]
    conn.execute(
        "UPDATE pgsched.job_definitions SET next_run_at = %s WHERE id = %s",
        [datetime(2026, 6, 1, 12, 1, tzinfo=UTC), job.id],
    )
    materialize.run_once(conn, now=at + timedelta(seconds=5))
    assert [runs.get(conn, row["id"]).not_before for row in runs_of(conn, job)] == before
    assert before[0] is not None


def test_dispatch_does_not_claim_a_run_before_its_jittered_start(conn):
    job = define(conn, schedule="* * * * *", jitterSeconds=SPREAD, now=T0)
    due = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)
    # An occurrence whose delay is at least 2 s, so "just before" is after the occurrence.
    while jitter.delay(job.id, due, seconds=SPREAD) < timedelta(seconds=2):
        due += timedelta(minutes=1)
    materialize.run_once(conn, now=due)
    start = due + jitter.delay(job.id, due, seconds=SPREAD)

    early = dispatch.run_once(conn, RecordingLauncher(), now=start - timedelta(seconds=1))
    assert early.claimed == []
    [queued] = [row for row in runs_of(conn, job) if row["status"] == "QUEUED"]
    said = waits.of_run(conn, queued["id"], now=start - timedelta(seconds=1))
    assert said is not None and said.reason == waits.JITTERED, said
    assert said.message.startswith(f"its jittered start, {wording.instant(start)}"), said
    on_time = dispatch.run_once(conn, RecordingLauncher(), now=start)
    assert [run.scheduled_for for run in on_time.claimed] == [due]
    assert runs.get(conn, on_time.claimed[0].id).not_before == start


def test_the_starting_deadline_counts_from_the_jittered_start(conn):
    job = define(
        conn, schedule="* * * * *", jitterSeconds=SPREAD, startingDeadlineSeconds=30, now=T0
    )
    materialize.run_once(conn, now=T0 + timedelta(minutes=1))
    [row] = runs_of(conn, job)
    start = runs.get(conn, row["id"]).not_before
    assert row["deadline_at"] == start + timedelta(seconds=30)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3601, "spec.jitterSeconds: 3601 is more than 3600"),
        (-1, "spec.jitterSeconds: -1 is out of range 0.."),
        ("5m", "spec.jitterSeconds: must be an integer, got string '5m'"),
    ],
)
def test_a_jitter_out_of_bounds_is_refused_naming_the_field(conn, value, message):
    with pytest.raises(SpecError) as refused:
        define(conn, schedule="* * * * *", jitterSeconds=value, now=T0)
    assert message in str(refused.value)
    assert "example: jitterSeconds: 300" in str(refused.value)
