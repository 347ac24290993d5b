"""Process entry points for the race and fault tests (importable by spawned children).

Each racer has its own process and its own connection, like a real replica. Work is
simulated: a claimed run "runs" for a few milliseconds and is then finished through the
same fenced ``lease.finish`` a job pod uses.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

import invariants
import previous_dispatch
from bench import planted
from pgsched.db import connection, migrate, queries
from pgsched.engine import dispatch, lease, runs
from pgsched.engine.models import Definition, Run
from pgsched.engine.tick import TickSettings


@dataclass
class SimulatedWork:
    """A launcher whose 'workload' finishes after a random short time."""

    rng: random.Random
    min_seconds: float = 0.001
    max_seconds: float = 0.03
    launched: list[int] = field(default_factory=list)
    pending: list[tuple[float, lease.Lease]] = field(default_factory=list)

    def launch(self, run: Run, definition: Definition) -> str | None:
        self.start(run)
        return None

    def start(self, run: Run) -> None:
        """The simulated workload of ``run`` starts; it finishes a few milliseconds later."""
        assert run.lease_token is not None
        self.launched.append(run.id)
        finish_at = time.monotonic() + self.rng.uniform(self.min_seconds, self.max_seconds)
        self.pending.append((finish_at, lease.Lease(run.id, run.lease_token)))

    def finish_due(self, conn: connection.Connection) -> int:
        now = time.monotonic()
        due = [item for item in self.pending if item[0] <= now]
        self.pending = [item for item in self.pending if item[0] > now]
        for _, run_lease in due:
            lease.finish(conn, run_lease, "COMPLETED")
        return len(due)


def _open_work(conn: connection.Connection) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE status IN ('QUEUED', 'RUNNING')"
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _claim_until_done(
    dsn: str,
    application_name: str,
    seed: int,
    seconds: float,
    claim_into: Callable[[connection.Connection, SimulatedWork, int], int],
) -> list[int]:
    """Claim-and-work loop until no QUEUED or RUNNING run is left; returns launched ids.

    ``claim_into(conn, work, batch_size)`` claims up to a batch, launches what it claimed
    into ``work`` and returns how many runs that was."""
    rng = random.Random(seed)
    work = SimulatedWork(rng)
    deadline = time.monotonic() + seconds
    with connection.connect(dsn, application_name=application_name) as conn:
        while time.monotonic() < deadline:
            work.finish_due(conn)
            claimed = claim_into(conn, work, rng.choice([1, 5, 10, 25]))
            if not claimed and not work.pending:
                if _open_work(conn) == 0:
                    break
                time.sleep(0.002)
        while work.pending:
            work.finish_due(conn)
            time.sleep(0.001)
    return work.launched


def dispatcher(
    dsn: str,
    worker: int,
    seed: int,
    seconds: float,
    unlocked: bool = False,
    try_locks: bool = False,
) -> list[int]:
    """This release's dispatcher (``dispatch.run_once``) in a claim-and-work loop.

    ``unlocked``: the planted bug of the negative control, the claim without its advisory
    locks (``planted.install_unlocked_claim`` must have run on the database first)."""
    if unlocked:
        planted.use_unlocked_claim()

    def claim_into(conn: connection.Connection, work: SimulatedWork, batch_size: int) -> int:
        result = dispatch.run_once(
            conn,
            work,
            batch_size=batch_size,
            try_locks=try_locks,
        )
        return len(result.claimed)

    return _claim_until_done(dsn, f"pgsched-racer-{worker}", seed, seconds, claim_into)


# The claim call of the release before migration 0014 (migrations 0010-0013): the same
# function, read without the definition_version column 0014 added. Kept verbatim so a
# rolling-upgrade test can run that release's dispatcher across later migrations.
RELEASE_0011_CLAIM = """
SELECT c.outcome, c.subject_run, c.subject_definition, (c.run).*
FROM pgsched.claim_for_dispatch(%(batch_size)s, 4, NULL::timestamptz, NULL::uuid[], 'wait') AS c
"""


def release_0011_dispatcher(dsn: str, worker: int, seed: int, seconds: float) -> list[int]:
    """The release before 0012 and 0014 (schema at 0011) in a claim-and-work loop: its
    claim call and the fenced finish, unchanged since 0010."""

    def claim_into(conn: connection.Connection, work: SimulatedWork, batch_size: int) -> int:
        try:
            with conn.transaction():
                rows = conn.execute(RELEASE_0011_CLAIM, {"batch_size": batch_size}).fetchall()
        except psycopg.errors.InternalError_ as error:
            # A claim in flight while the migration replaced job_runs finishes its old plan
            # against a table or row type that no longer exists ("could not open relation
            # with OID", "cache lookup failed for type"). Its transaction rolls back (nothing
            # claimed) and the shipped loop fails open to the next tick: so does this one.
            if not any(gone in str(error) for gone in ("could not open relation", "cache lookup")):
                raise
            return 0
        claimed = [Run.from_row(row) for row in rows if row["outcome"] == "claimed"]
        for run in claimed:
            work.start(run)
        return len(claimed)

    return _claim_until_done(dsn, f"pgsched-release-0011-{worker}", seed, seconds, claim_into)


def mixed_version_dispatcher(dsn: str, worker: int, seed: int, seconds: float) -> list[int]:
    """Even workers claim as the release before migration 0005 did (``previous_dispatch``),
    odd ones with this release's one-call claim: a rolling upgrade, mid-roll."""
    if worker % 2:
        return dispatcher(dsn, worker, seed, seconds)

    def claim_into(conn: connection.Connection, work: SimulatedWork, batch_size: int) -> int:
        claimed = previous_dispatch.claim(conn, batch_size=batch_size)
        for run in claimed:
            work.start(run)
        return len(claimed)

    return _claim_until_done(dsn, f"pgsched-previous-{worker}", seed, seconds, claim_into)


def leaderless_ticker(dsn: str, worker: int, seed: int, seconds: float) -> list[int]:
    """A full tick loop that acts as leader on every tick, as a paused-then-woken leader would."""
    work = SimulatedWork(random.Random(seed))
    ticker = planted.LeaderlessTicker(
        lambda: connection.connect(dsn, application_name=f"pgsched-ticker-{worker}"),
        work,
        TickSettings(dispatch_batch=10),
    )
    deadline = time.monotonic() + seconds
    with connection.connect(dsn) as conn:
        idle = 0
        while time.monotonic() < deadline and idle < 50:
            work.finish_due(conn)
            result = ticker.run_once()
            assert result.error is None, result.error
            busy = bool(result.dispatched and result.dispatched.claimed) or work.pending
            idle = 0 if busy or _open_work(conn) else idle + 1
            time.sleep(0.002)
        while work.pending:
            work.finish_due(conn)
            time.sleep(0.001)
    ticker.close()
    return work.launched


def sampler(dsn: str, stop: Any, results: Any) -> None:
    """Sample live RUNNING counts against caps and pool limits until ``stop`` is set (I2
    and I9, observed live)."""
    samples, violations = 0, []
    with connection.connect(dsn, application_name="pgsched-sampler") as conn:
        while not stop.is_set():
            rows = conn.execute(
                "SELECT r.definition_id, count(*) AS running, d.max_concurrent_runs AS cap"
                " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
                " WHERE r.status = 'RUNNING'"
                " GROUP BY r.definition_id, d.max_concurrent_runs"
                " HAVING count(*) > d.max_concurrent_runs"
            ).fetchall()
            # I9 too: no pool's RUNNING runs, across its jobs, above its limit.
            rows += conn.execute(
                "SELECT p.namespace || '/' || p.name AS pool, count(*) AS running,"
                " p.concurrency_limit AS pool_limit"
                " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
                " JOIN pgsched.job_pools p ON p.namespace || '/' || p.name = d.pool"
                " WHERE r.status = 'RUNNING'"
                " GROUP BY p.namespace, p.name, p.concurrency_limit"
                " HAVING count(*) > p.concurrency_limit"
            ).fetchall()
            samples += 1
            violations += [dict(row) for row in rows]
    results.put((samples, violations))


def killed_claimer(dsn: str, rounds: int, pause: float) -> int:
    """Claims in a transaction that never commits: each round its session is terminated
    while it holds the claim's locks and its uncommitted RUNNING rows. Returns the number
    of sessions killed mid-claim."""
    killed = 0
    with connection.connect(dsn, application_name="pgsched-killer") as killer:
        for _ in range(rounds):
            victim = psycopg.connect(dsn, application_name="pgsched-victim", autocommit=False)
            try:
                pid = victim.info.backend_pid
                victim.execute(queries.get("claim_for_dispatch"), _CLAIM_ALL).fetchall()
                time.sleep(pause)  # others now wait for (or skip) what it holds
                killer.execute("SELECT pg_terminate_backend(%s)", [pid])
                killed += 1
            except psycopg.Error:
                pass  # the victim lost its session: what we wanted
            finally:
                with contextlib.suppress(psycopg.Error):
                    victim.close()
            time.sleep(pause)
    return killed


_CLAIM_ALL = {
    "batch_size": 25,
    "overshoot": 4,
    "now": None,
    "definition_ids": None,
    "try_locks": False,
}


def pool_dispatcher(dsn: str, worker: int, seed: int, seconds: float) -> list[int]:
    """Even workers wait for their locks (sorted), odd ones try them first."""
    return dispatcher(dsn, worker, seed, seconds, try_locks=bool(worker % 2))


def run_now_requester(
    dsn: str,
    seed: int,
    definitions: list[Any],
    months: list[Any],
    progress: Any,
    stop: Any,
    results: Any,
) -> None:
    """Repeats run-now requests with one token per month while another process creates
    those months' partitions: the token of ``months[progress.value]``, the month being
    created next, for a random definition, queued in that month (in the default partition
    until it exists) or now (this month's). Returns how many requests it made and what
    went wrong with any of them (each should queue a run or return the earlier one) on
    ``results``."""
    rng = random.Random(seed)
    requests, errors = 0, []
    with connection.connect(dsn, application_name=f"pgsched-requester-{seed}") as conn:
        while not stop.is_set() and progress.value < len(months):
            index = progress.value
            at = rng.choice([months[index] + timedelta(days=1), None])
            try:
                runs.run_now(
                    conn, rng.choice(definitions), token=f"month-{index}", scheduled_for=at
                )
            except (psycopg.Error, runs.UnknownDefinition) as error:
                errors.append(f"month {index}: {type(error).__name__}: {error}")
            requests += 1
    results.put((requests, errors))


# -- a rolling upgrade: dispatchers of the previous release race the new one's migrate -------


def seed_queue(conn: connection.Connection, *, definitions: int, runs_each: int) -> None:
    """``definitions`` jobs (caps 1 to 3), each with ``runs_each`` runs QUEUED and due."""
    ids = [uuid.uuid4() for _ in range(definitions)]
    conn.execute(
        "INSERT INTO pgsched.job_definitions (id, namespace, name, schedule_kind, schedule,"
        " anchor, max_concurrent_runs)"
        " SELECT id, 'up', 'def-' || n, 'cron', '0 0 1 1 *', now(), 1 + n %% 3"
        " FROM unnest(%s::uuid[]) WITH ORDINALITY AS t(id, n)",
        [ids],
    )
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, request_token)"
        " SELECT d, 'QUEUED', 'manual', now() - random() * interval '10 seconds', 'seed-' || g"
        " FROM unnest(%s::uuid[]) d, generate_series(1, %s) g",
        [ids, runs_each],
    )


def count_runs(conn: connection.Connection, where: str = "true") -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM pgsched.job_runs WHERE {where}").fetchone()
    assert row is not None
    return int(row["n"])


def race_the_migration(
    dsn: str,
    *,
    version: int,
    dispatcher: Callable[[str, int, int, float], list[int]],
    seed: int,
    total: int,
) -> migrate.MigrateResult:
    """Four ``dispatcher`` processes claim and finish the ``total`` seeded runs while the
    migrations after ``version`` (and the function files) are applied under them,
    mid-race; then no run was lost or launched twice, every one completed, and no cap was
    exceeded. Returns what the migration applied."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        racing = pool.starmap_async(
            dispatcher, [(dsn, worker, seed + worker, 240) for worker in range(4)]
        )
        with connection.connect(dsn) as conn:
            deadline = time.monotonic() + 60
            while count_runs(conn, "status = 'COMPLETED'") < total / 10:
                assert time.monotonic() < deadline, "the dispatchers never got going"
                time.sleep(0.05)
            result = migrate.migrate(conn)
            assert result.applied == [m.version for m in migrate.available() if m.version > version]
            done_before = count_runs(conn, "status = 'COMPLETED'")
        launched = [run_id for batch in racing.get(timeout=300) for run_id in batch]

    assert 0 < done_before < total, "the migration must land mid-race"
    assert invariants.no_double_launch(launched) == []
    assert len(launched) == total
    with connection.connect(dsn) as conn:
        assert count_runs(conn) == total
        assert count_runs(conn, "status = 'COMPLETED'") == total
        assert invariants.never_over_cap(conn) == []
        assert invariants.every_attempt_terminal(conn) == []
    return result
