"""A benchmark whose worker process dies mid-measurement measures again, and says so.

A process pool replaces a dead worker but loses its task; without a deadline the
benchmark (and the suite running its smoke test) would wait for it forever.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import psycopg
import pytest

from bench import seed
from bench.claiming import Arm, Series
from bench.environment import Environment
from bench.workers import Crew
from devenv.postgres import PostgresServer
from devenv.waiting import wait_for
from pgsched.db import connection


def signal_a_worker_once_claiming(dsn: str, signum: int) -> None:
    """Signal one crew member once the workers' sessions are open (the measurement is on)."""
    with psycopg.connect(dsn, autocommit=True) as watcher:
        wait_for(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgsched-bench'"
                ).fetchone()[0]
                > 0
            ),
            30,
            describe="a worker's session",
        )
    os.kill(multiprocessing.active_children()[0].pid, signum)


@pytest.mark.parametrize(
    ("signum", "lost"),
    [
        (signal.SIGKILL, "a worker process running claim_loop died (exit code -9)"),
        (signal.SIGSTOP, "claim_loop did not finish within 7s"),  # 1 s window + 0.6 + 5
    ],
    ids=["killed", "frozen"],
)
def test_a_worker_lost_mid_measurement_is_measured_again_and_the_report_says_so(
    postgres: PostgresServer, signum: int, lost: str
) -> None:
    env = Environment(postgres)
    dsn = env.create_database("crewlost")
    try:
        with connection.connect(dsn) as conn, Crew(2) as crew:
            seed.definitions(conn, count=10, cap=100_000, due=False)
            series = Series(crew, conn, dsn, 1.0, min_queue=2_000, grace=5.0)
            killer = threading.Thread(target=signal_a_worker_once_claiming, args=(dsn, signum))
            killer.start()
            series.cell("cell", [Arm("raw", "raw")], workers=2, batch=10, round_no=0)
            killer.join()
            [rate] = series.rates[("cell", "raw")]
            assert rate > 0  # the second measurement, with every worker
            [note] = series.lost_notes()
            assert (
                note
                == f"measured again after workers were lost (1): raw, 2 workers, batch 10: {lost}"
            )
            assert crew.run([], timeout=5) == []  # the rebuilt crew serves
    finally:
        env.drop_databases()
