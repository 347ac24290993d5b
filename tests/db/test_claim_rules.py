"""The one-call claim chooses exactly what the documented rules say, on random queues.

``pgsched.claim_for_dispatch`` walks the candidates with window functions in SQL; the rules
it implements are simplest to state as a loop (the multi-statement claim of the previous
release was that loop, in Python). :func:`expected` is that loop, written from the rules in
``pgsched.engine.dispatch``'s docstring. Each case builds a random queue — definitions with
caps 1-3 and every ``concurrencyPolicy``, some already running (some of those asked to
stop), some deleted, scheduled and manual runs, some joining a concurrency pool (limit 1-3,
or a pool that does not exist) — claims once with a random batch, and compares every
consequence: runs claimed, runs SKIPPED (and whose limit the error names), running runs
asked to stop (and which), definitions reported held back by their cap or their pool.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from pgsched.engine import dispatch

CASES = 150
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Limits:
    cap: int
    policy: str
    deleted: bool
    running: int
    stopping: int
    pool: str | None  # the pool it joins, by name


@dataclass
class Expected:
    claimed: set[int]
    skipped: set[int]
    skipped_by_pool: dict[int, str]  # run -> the pool named in its error
    replace: set[int]
    at_cap: set[uuid.UUID]


def pool_rooms(limits: dict[uuid.UUID, Limits], pools: dict[str, int]) -> dict[str, int]:
    """Each named pool's free slots: its limit minus its jobs' RUNNING runs (deleted jobs'
    too); a pool that does not exist has none."""
    running = Counter[str]()
    for item in limits.values():
        if item.pool is not None:
            running[item.pool] += item.running
    named = {item.pool for item in limits.values() if item.pool is not None}
    return {name: max(0, pools[name] - running[name]) if name in pools else 0 for name in named}


def takeable(
    candidates: list[dict], room: dict[uuid.UUID, int], limits: dict, pool_room: dict[str, int]
) -> int:
    """How many of ``candidates`` the free slots would take, batch aside."""
    left, pool_left, taken = dict(room), dict(pool_room), 0
    for row in candidates:
        d = row["definition_id"]
        pool = limits[d].pool
        if left.get(d, 0) > 0 and (pool is None or pool_left[pool] > 0):
            left[d] -= 1
            taken += 1
            if pool is not None:
                pool_left[pool] -= 1
    return taken


def expected(
    candidates: list[dict],
    limits: dict[uuid.UUID, Limits],
    running_by_age: dict[uuid.UUID, list[tuple[int, bool]]],
    batch: int,
    pools: dict[str, int],
) -> Expected:
    """The rules, as a loop over the candidates in queue order (one dispatcher: every lock
    it asks for is granted)."""
    first = list(dict.fromkeys(row["definition_id"] for row in candidates[:batch]))
    locked = {d: limits[d] for d in first if d in limits}
    room = {d: max(0, item.cap - item.running) for d, item in locked.items() if not item.deleted}
    pool_room = pool_rooms(limits, pools)
    claimable = takeable(candidates, room, limits, pool_room)
    rest = [row["definition_id"] for row in candidates if row["definition_id"] not in locked]
    if rest and claimable < batch:
        locked |= {d: limits[d] for d in rest if d in limits}
    room = {d: max(0, item.cap - item.running) for d, item in locked.items()}
    result = Expected(set(), set(), {}, set(), set())
    waiting: Counter[uuid.UUID] = Counter()
    for row in candidates:
        item = locked.get(row["definition_id"])
        if item is None or item.deleted:
            continue
        d, pool = row["definition_id"], item.pool
        pool_has_room = pool is None or pool_room[pool] > 0
        if room[d] > 0 and pool_has_room and len(result.claimed) < batch:
            room[d] -= 1
            result.claimed.add(row["id"])
            if pool is not None:
                pool_room[pool] -= 1
        elif room[d] == 0:
            result.at_cap.add(d)
            if row["trigger"] == "schedule" and item.policy == "Skip":
                result.skipped.add(row["id"])
            elif row["trigger"] == "schedule" and item.policy == "Replace":
                waiting[d] += 1
        elif not pool_has_room and pool in pools:
            # At the pool's limit (a pool that does not exist holds its jobs' runs back
            # without a verdict: they wait for it). Replace acts only for the job's own cap.
            result.at_cap.add(d)
            if row["trigger"] == "schedule" and item.policy == "Skip":
                result.skipped.add(row["id"])
                result.skipped_by_pool[row["id"]] = pool
    for d, count in waiting.items():
        extra = min(count, locked[d].running) - locked[d].stopping
        oldest_not_stopping = [run_id for run_id, stopping in running_by_age[d] if not stopping]
        result.replace |= set(oldest_not_stopping[: max(0, extra)])
    return result


def _months_ago(n: int) -> datetime:
    """NOW, a month before or two (by n): queues and RUNNING runs span three partitions, as
    a backfill's or a long run's do, so the claim's month bounds are exercised too."""
    return NOW - timedelta(days=31 * (n % 3))


def build_queue(conn, rng: random.Random):
    """Random pools, definitions and runs; returns what :func:`expected` needs."""
    pools = {f"pool-{index}": rng.randint(1, 3) for index in range(rng.randint(0, 2))}
    for name, limit in pools.items():
        conn.execute(
            "INSERT INTO pgsched.job_pools (namespace, name, concurrency_limit)"
            " VALUES ('rules', %s, %s)",
            [name, limit],
        )
    # A job may name a pool that does not exist (yet): its runs wait.
    names = [*pools, *pools, *pools, "pool-missing", None]
    limits: dict[uuid.UUID, Limits] = {}
    running_by_age: dict[uuid.UUID, list[tuple[int, bool]]] = {}
    queued: list[tuple[uuid.UUID, str, datetime]] = []
    for index in range(rng.randint(1, 8)):
        d = uuid.uuid4()
        cap = rng.randint(1, 3)
        policy = rng.choice(["Queue", "Skip", "Replace"])
        deleted = rng.random() < 0.1
        pool = rng.choice(names)
        conn.execute(
            "INSERT INTO pgsched.job_definitions (id, namespace, name, schedule_kind, schedule,"
            " anchor, max_concurrent_runs, concurrency_policy, deleted_at, spec)"
            " VALUES (%s, 'rules', %s, 'cron', '0 0 1 1 *', %s, %s, %s, %s, %s)",
            [
                d,
                f"def-{index}",
                NOW,
                cap,
                policy,
                NOW if deleted else None,
                Jsonb({"pool": pool} if pool else {}),
            ],
        )
        running = []
        for age in range(rng.randint(0, cap + 1)):
            stopping = rng.random() < 0.3
            row = conn.execute(
                "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
                " request_token, lease_token, started_at, cancel_requested)"
                " VALUES (%s, 'RUNNING', 'manual', %s, %s, gen_random_uuid(), %s, %s)"
                " RETURNING id",
                [
                    d,
                    _months_ago(age),
                    f"running-{age}",
                    NOW - timedelta(minutes=30 - age),
                    stopping,
                ],
            ).fetchone()
            running.append((row["id"], stopping))
        running_by_age[d] = running
        limits[d] = Limits(
            cap, policy, deleted, len(running), sum(1 for _, stopping in running if stopping), pool
        )
        for minute in range(rng.randint(0, 6)):
            scheduled_for = _months_ago(minute) - timedelta(minutes=minute)
            queued.append((d, rng.choice(["schedule", "manual"]), scheduled_for))
    rng.shuffle(queued)
    for position, (d, trigger, scheduled_for) in enumerate(queued):
        conn.execute(
            "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
            " request_token) VALUES (%s, 'QUEUED', %s, %s, %s)",
            [d, trigger, scheduled_for, None if trigger == "schedule" else f"q-{position}"],
        )
    return limits, running_by_age, pools


@pytest.mark.parametrize("try_locks", [False, True], ids=["wait", "try"])
def test_the_claim_function_applies_the_rules_on_random_queues(conn, try_locks):
    rng = random.Random(20261130 + try_locks)
    pool_skips = 0
    for month in range(2, 8):  # NOW's month, the ones before, one ahead; the rest: default
        conn.execute(
            "SELECT pgsched.create_run_partition(%s)", [datetime(2026, month, 1, tzinfo=UTC)]
        )
    for case in range(CASES):
        conn.execute(
            "TRUNCATE pgsched.job_runs, pgsched.job_definitions, pgsched.job_pools CASCADE"
        )
        limits, running_by_age, pools = build_queue(conn, rng)
        batch, overshoot = rng.randint(1, 6), rng.randint(1, 4)
        candidates = conn.execute(
            "SELECT id, definition_id, trigger FROM pgsched.job_runs WHERE status = 'QUEUED'"
            " ORDER BY scheduled_for, id LIMIT %s",
            [batch * overshoot],
        ).fetchall()
        want = expected(candidates, limits, running_by_age, batch, pools)

        got = dispatch.claim(conn, batch_size=batch, overshoot=overshoot, try_locks=try_locks)

        context = f"case {case}: batch {batch}, overshoot {overshoot}, pools {pools}, {limits}"
        assert {run.id for run in got.claimed} == want.claimed, context
        assert set(got.skipped) == want.skipped, context
        assert set(got.replace_requested) == want.replace, context
        assert got.at_cap == want.at_cap, context
        rows = conn.execute("SELECT id, status, cancel_requested, error FROM pgsched.job_runs")
        statuses, errors = {}, {}
        for row in rows:
            statuses[row["id"]] = (row["status"], row["cancel_requested"])
            errors[row["id"]] = row["error"] or ""
        assert all(statuses[run_id] == ("RUNNING", False) for run_id in want.claimed), context
        assert all(statuses[run_id][0] == "SKIPPED" for run_id in want.skipped), context
        assert all(statuses[run_id] == ("RUNNING", True) for run_id in want.replace), context
        for run_id in want.skipped:
            pool = want.skipped_by_pool.get(run_id)
            named = f"the pool {pool} was at its limit" if pool else "at maxConcurrentRuns"
            assert named in errors[run_id], (context, errors[run_id])
        pool_skips += len(want.skipped_by_pool)
    assert pool_skips > 5, "the random queues must have put pools at their limit"
