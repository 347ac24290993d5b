"""The chaos checker can fail: switch one safeguard off and it reports the damage.

Each test runs the database variant with one planted bug (installed from the test side,
see ``dbchaos`` and ``bench/planted.py``; the product has no switch for it) and asserts
that the checker finds the violation the safeguard prevents.
Without these, a checker that never reports anything would look exactly like success.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from chaos.config import ChaosConfig
from chaos.dbchaos import DatabaseChaos
from devenv.postgres import PostgresServer
from plugins.postgres import migrated_server


@contextlib.contextmanager
def fresh_server() -> Iterator[PostgresServer]:
    """A migrated server like ``chaos_postgres``, for a run after the first."""
    yield from migrated_server({"synchronous_commit": "on"})


pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_the_checker_catches_caps_exceeded_when_dispatch_skips_its_advisory_locks(
    chaos_postgres, tmp_path
):
    """Three replicas that all lead and claim without their definitions' locks read the
    same RUNNING counts and claim past the caps (I2); SKIP LOCKED still keeps every claim
    single (I1). A backlog keeps every definition at its cap with runs queued behind it,
    so the replicas contend on every tick.

    Two replicas must read the counts between each other's claims for the caps to break,
    which a starved machine makes rarer (seen once in make test, the suite's other runs
    saturating both cores: 233 runs in 15 s, none over its cap): up to three runs, each
    with a seed of its own, until one shows it; none may claim a run twice."""
    with contextlib.ExitStack() as servers:
        for attempt in range(3):
            # Each run on a database of its own: the checker reads every row there.
            server = chaos_postgres if attempt == 0 else servers.enter_context(fresh_server())
            work_dir = tmp_path / f"run-{attempt}"
            work_dir.mkdir()
            config = ChaosConfig("db", seconds=15, planted="unlocked-dispatch", fault_kinds=())
            chaos = DatabaseChaos(
                config,
                server,
                work_dir,
                definitions=8,
                requests_per_second=3,
                job_seconds=(0.3, 1.0),
                tick_interval=0.05,
                backlog=25,
            )
            report = chaos.run()
            assert report.violations["I1"] == [], report.summary()
            if report.violations["I2"]:
                break

    assert report.violations["I2"], report.summary()


def test_the_checker_catches_pools_over_their_limit_when_the_claim_ignores_them(
    chaos_postgres, tmp_path
):
    """Every definition joins a pool (limits 2 and 4) and has a backlog; the replicas claim
    through a planted copy of the claim that keeps its locks and caps but not the pools'
    limits, so the pools run over (I9) while caps hold (I2)."""
    config = ChaosConfig("db", seconds=15, planted="poolless-dispatch", fault_kinds=())
    chaos = DatabaseChaos(
        config,
        chaos_postgres,
        tmp_path,
        definitions=8,
        requests_per_second=3,
        job_seconds=(0.3, 1.0),
        tick_interval=0.05,
        backlog=25,
        pooled_share=1.0,
    )

    report = chaos.run()

    assert report.violations["I9"], report.summary()
    assert report.violations["I2"] == [], report.summary()


def test_the_checker_catches_outcomes_overwritten_when_jobs_finish_unfenced(
    chaos_postgres, tmp_path
):
    """Jobs frozen past their heartbeat timeout are reaped HeartbeatLost; when they wake
    they ignore the lost lease and write COMPLETED without the status/lease fence (I4)."""
    config = ChaosConfig(
        "db",
        seconds=20,
        planted="unfenced-finish",
        fault_kinds=("job_pause",),
        fault_gap=(1.0, 2.0),
        pause_seconds=(8.0, 10.0),
    )
    chaos = DatabaseChaos(
        config, chaos_postgres, tmp_path, definitions=20, requests_per_second=1, job_seconds=(3, 6)
    )

    report = chaos.run()

    assert report.faults.get("job_pause", 0) > 0
    assert any("overwritten by" in item for item in report.violations["I4"]), report.summary()


def test_the_checker_catches_succeeded_work_run_again_when_acknowledged_outcomes_are_lost(
    chaos_postgres, tmp_path
):
    """Acknowledged COMPLETED outcomes are rolled back (as an asynchronous failover loses
    them): the database alone looks consistent, the job side's execution log does not."""
    config = ChaosConfig("db", seconds=12, planted="forgetful-finish", fault_kinds=())
    chaos = DatabaseChaos(
        config,
        chaos_postgres,
        tmp_path,
        definitions=6,
        requests_per_second=2,
        job_seconds=(0.3, 1.0),
    )

    report = chaos.run()

    # (The live sampler also sees the rollback, which a real failover would hide from it;
    # the final tables show nothing wrong. The execution log is what catches it.)
    found = report.violations["I8"]
    assert any("was acknowledged to its job" in item for item in found), report.summary()
    assert any("was executed again as run" in item for item in found), report.summary()
