"""Many real processes racing over the same queue: no double claim (I1), never over cap (I2).

Each racer is a separate OS process with its own connection. A sampler process watches
live RUNNING counts while they race; afterwards the recorded run intervals are swept too.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import uuid

import pytest

import invariants
import racers
from bench import planted
from factories import define
from pgsched.db import connection
from pgsched.engine import runs

DEFINITIONS = 200
RUNS_PER_DEFINITION = 15
WORKERS = 8


def seed_definitions(conn, *, count, runs_each, seed=11, namespace="race"):
    rng = random.Random(seed)
    ids = [uuid.uuid4() for _ in range(count)]
    caps = [rng.randint(1, 5) for _ in range(count)]
    conn.execute(
        "INSERT INTO pgsched.job_definitions (id, namespace, name, schedule_kind, schedule, anchor,"
        " max_concurrent_runs)"
        " SELECT id, %s, 'def-' || n, 'cron', '0 0 1 1 *', now(), cap"
        " FROM unnest(%s::uuid[], %s::int[]) WITH ORDINALITY AS t(id, cap, n)",
        [namespace, ids, caps],
    )
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, request_token)"
        " SELECT d, 'QUEUED', 'manual', now() - random() * interval '10 seconds', 'seed-' || g"
        " FROM unnest(%s::uuid[]) d, generate_series(1, %s) g",
        [ids, runs_each],
    )
    return ids


def race(dsn, target, workers, seconds, **kwargs):
    """Run ``target`` in ``workers`` processes next to a live cap sampler; returns the run
    ids launched (all workers), the sampler's sample count and what it saw over cap."""
    by_worker, samples, violations = race_by_worker(dsn, target, workers, seconds, **kwargs)
    return [run_id for batch in by_worker for run_id in batch], samples, violations


def race_by_worker(dsn, target, workers, seconds, **kwargs):
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    watcher = context.Process(target=racers.sampler, args=(dsn, stop, results))
    watcher.start()
    try:
        with context.Pool(workers) as pool:
            launched = pool.starmap(
                functools.partial(target, **kwargs),
                [(dsn, worker, 1000 + worker, seconds) for worker in range(workers)],
            )
    finally:
        stop.set()
        samples, violations = results.get(timeout=30)
        watcher.join(timeout=30)
    return launched, samples, violations


@pytest.mark.parametrize("try_locks", [False, True], ids=["wait", "try"])
def test_eight_dispatchers_never_double_claim_and_never_exceed_caps(dsn, try_locks):
    """Both lock modes: waiting in sorted order (the default) and trying first."""
    with connection.connect(dsn) as conn:
        seed_definitions(conn, count=DEFINITIONS, runs_each=RUNS_PER_DEFINITION)

    launched, samples, live_violations = race(
        dsn, racers.dispatcher, WORKERS, 240, unlocked=False, try_locks=try_locks
    )

    total = DEFINITIONS * RUNS_PER_DEFINITION
    assert invariants.no_double_launch(launched) == []
    assert len(launched) == total
    assert samples > 100, "the sampler must have watched the race"
    assert live_violations == []
    with connection.connect(dsn) as conn:
        assert invariants.never_over_cap(conn) == []
        assert invariants.every_attempt_terminal(conn) == []


def test_previous_release_and_this_one_claiming_side_by_side_keep_caps(dsn):
    """A rolling upgrade mid-roll: four dispatchers claim as the release before migration
    0005 did (its statements, the 0004 functions still in the schema), four with the
    one-call claim. Both take the same definition locks, so caps hold across versions."""
    with connection.connect(dsn) as conn:
        seed_definitions(conn, count=DEFINITIONS, runs_each=RUNS_PER_DEFINITION, seed=12)

    by_worker, samples, live_violations = race_by_worker(
        dsn, racers.mixed_version_dispatcher, WORKERS, 240
    )

    launched = [run_id for batch in by_worker for run_id in batch]
    previous = sum(len(batch) for worker, batch in enumerate(by_worker) if worker % 2 == 0)
    current = len(launched) - previous
    # Both versions did a real share of the work, or the race proves nothing.
    assert previous > len(launched) / 8 and current > len(launched) / 8, (previous, current)
    assert invariants.no_double_launch(launched) == []
    assert len(launched) == DEFINITIONS * RUNS_PER_DEFINITION
    assert samples > 100 and live_violations == []
    with connection.connect(dsn) as conn:
        assert invariants.never_over_cap(conn) == []
        assert invariants.every_attempt_terminal(conn) == []


def test_invariants_hold_with_leader_election_bypassed(dsn):
    """Three tick loops that all believe they lead: materialize, reap, settle and dispatch race."""
    with connection.connect(dsn) as conn:
        ids = seed_definitions(conn, count=100, runs_each=0)
        # Every definition owes the last 30 minutes at once (catchUp all), so all three
        # "leaders" try to materialize the same occurrences in their first ticks.
        conn.execute(
            "UPDATE pgsched.job_definitions SET schedule = '* * * * *', catch_up = 'all',"
            " catch_up_limit = 30, next_run_at = date_trunc('minute', now()) - interval '29 minutes'"
            " WHERE id = ANY(%s)",
            [ids],
        )

    launched, samples, live_violations = race(dsn, racers.leaderless_ticker, 3, seconds=240)

    assert invariants.no_double_launch(launched) == []
    assert samples > 50 and live_violations == []
    with connection.connect(dsn) as conn:
        assert invariants.no_duplicate_occurrence(conn) == []
        assert invariants.never_over_cap(conn) == []
        assert invariants.every_attempt_terminal(conn) == []
        queued = conn.execute(
            "SELECT count(*) AS n FROM pgsched.job_runs WHERE trigger = 'schedule' AND status <> 'SKIPPED'"
        ).fetchone()["n"]
    assert queued >= 100 * 30 and len(launched) == queued


def test_the_checks_catch_over_cap_claims_when_the_advisory_lock_is_skipped(dsn):
    """The experiment can fail: without the per-definition lock (a planted copy of the
    claim function, created here), racers overshoot caps."""
    with connection.connect(dsn) as conn:
        seed_definitions(conn, count=5, runs_each=200)
        conn.execute("UPDATE pgsched.job_definitions SET max_concurrent_runs = 1")
        planted.install_unlocked_claim(conn)

    launched, _, live_violations = race(
        dsn, racers.dispatcher, WORKERS, seconds=120, unlocked=True, try_locks=False
    )

    assert invariants.no_double_launch(launched) == []  # SKIP LOCKED still prevents double claims
    with connection.connect(dsn) as conn:
        assert invariants.never_over_cap(conn) != [] or live_violations != []


def test_chained_runs_are_exactly_once_with_three_leaderless_tick_loops(dsn):
    """Settle races too: three "leaders" settle the same final upstream runs and every one
    queues its downstream runs; exactly one per (downstream, upstream run) survives (I10)."""
    with connection.connect(dsn) as conn:
        for index in range(10):
            upstream = define(conn, f"up-{index}", schedule="0 0 1 1 *", maxConcurrentRuns=3)
            define(conn, f"down-{index}", after=[{"scheduledJob": f"up-{index}"}])
            for token in range(10):
                runs.run_now(conn, upstream.id, token=f"seed-{token}")
        define(
            conn,
            "join",
            after=[{"scheduledJob": "up-0"}, {"scheduledJob": "up-1"}],
            afterMode="All",
        )

    launched, _samples, live_violations = race(dsn, racers.leaderless_ticker, 3, seconds=120)

    assert invariants.no_double_launch(launched) == [] and live_violations == []
    with connection.connect(dsn) as conn:
        assert invariants.chained_exactly_once(conn) == []
        counts = conn.execute(
            "SELECT count(*) FILTER (WHERE trigger = 'upstream') AS chained,"
            " count(*) FILTER (WHERE status = 'COMPLETED') AS completed"
            " FROM pgsched.job_runs"
        ).fetchone()
    # 100 upstream runs, each chained once into its down-N; join fired at least once.
    assert counts["chained"] > 100 and counts["completed"] == counts["chained"] + 100


def _race_try_lock_dispatchers_past_a_crowded_definition(dsn, *, planted_claim, namespace="race"):
    """Eight try-lock dispatchers over one crowded definition (cap 2, 300 runs) and 20
    roomy ones (cap 50, 20 runs each). A claim often finds the crowded one held by another
    dispatcher while every definition it did lock has room to spare: migration 0018 claims
    such a batch without the choice, and must leave the crowded one's runs queued."""
    with connection.connect(dsn) as conn:
        crowded, *_ = seed_definitions(conn, count=21, runs_each=20, seed=13, namespace=namespace)
        conn.execute(
            "UPDATE pgsched.job_definitions SET max_concurrent_runs = 50 WHERE namespace = %s",
            [namespace],
        )
        conn.execute(
            "UPDATE pgsched.job_definitions SET max_concurrent_runs = 2 WHERE id = %s", [crowded]
        )
        conn.execute(
            "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
            " request_token) SELECT %s, 'QUEUED', 'manual',"
            " now() - random() * interval '10 seconds', 'crowd-' || g"
            " FROM generate_series(1, 280) g",
            [crowded],
        )
        if planted_claim:
            planted.install_claim_sparing_unlocked_candidates(conn)
    launched, _, live_violations = race(
        dsn, racers.dispatcher, WORKERS, 120, unlocked=planted_claim, try_locks=True
    )
    assert invariants.no_double_launch(launched) == []
    with connection.connect(dsn) as conn:
        return len(launched), invariants.never_over_cap(conn), live_violations


def test_try_lock_dispatchers_claiming_batches_with_room_to_spare_keep_caps(dsn):
    launched, over_cap, live_violations = _race_try_lock_dispatchers_past_a_crowded_definition(
        dsn, planted_claim=False
    )
    assert launched == 21 * 20 + 280
    assert over_cap == [] and live_violations == []


def test_the_checks_catch_a_spare_verdict_blind_to_definitions_another_dispatcher_holds(dsn):
    """The experiment can fail: a claim (planted, created here) whose room-to-spare verdict
    judges only the candidates whose definitions it locked claims the others unlocked.

    The bug shows only when a claim finds the crowded definition held by another
    dispatcher: in about 1 race of 10 it never does. Up to three races (each on fresh runs)
    make a checker that cannot see the bug fail, and a working one pass, all but always."""
    for attempt in range(3):
        _, over_cap, live_violations = _race_try_lock_dispatchers_past_a_crowded_definition(
            dsn, planted_claim=True, namespace=f"race-{attempt}"
        )
        if over_cap or live_violations:
            break
    assert over_cap != [] or live_violations != []
