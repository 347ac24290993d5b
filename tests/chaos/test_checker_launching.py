"""The chaos checker knows the two run states of workload starts, and still fails on a bug.

A run the operator sees launching (its workload not started yet) is bounded by its start
bound, not by the orphan timeout; a claim whose Job the API server could not take goes back
to QUEUED. The checker must accept both and still catch a launching run past its bound and
any other way back from RUNNING. Each case plants, from the test side, the rows the product
or a broken one would leave; a short database test, not a chaos run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chaos.sampler import Sampler
from factories import RecordingLauncher, define
from invariants import install_run_audit, terminal_statuses_final
from pgsched.engine import dispatch, runs

SLACK = 5.0


def claimed(conn, name: str) -> int:
    job = define(conn, name, heartbeat={"intervalSeconds": 1, "timeoutSeconds": 10})
    runs.run_now(conn, job.id, token="a")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return run.id


def queued_behind(conn, run_id: int, *, due_ago: float) -> int:
    """A second run of ``run_id``'s job (cap 1), due ``due_ago`` s ago and still QUEUED."""
    definition_id = conn.execute(
        "SELECT definition_id FROM pgsched.job_runs WHERE id = %s", [run_id]
    ).fetchone()["definition_id"]
    queued = runs.run_now(conn, definition_id, token="b").run
    conn.execute(
        "UPDATE pgsched.job_runs SET scheduled_for = now() - make_interval(secs => %s)"
        " WHERE id = %s",
        [due_ago, queued.id],
    )
    return queued.id


def launching(conn, run_id: int, *, started_ago: float, bound_after: float) -> None:
    """Claimed ``started_ago`` s ago, never heartbeated, observed launching just now, to
    start by ``bound_after`` s after its claim."""
    now = datetime.now(UTC)
    started = now - timedelta(seconds=started_ago)
    conn.execute(
        "UPDATE pgsched.job_runs SET started_at = %s, heartbeat_at = NULL WHERE id = %s",
        [started, run_id],
    )
    conn.execute(
        "INSERT INTO pgsched.run_starts (run_id, waiting_reason, bound_at, observed_at)"
        " VALUES (%s, 'ContainerCreating', %s, %s)",
        [run_id, started + timedelta(seconds=bound_after), now],
    )


def silent_runs(conn, *, queue_bound: float = 600) -> list[str]:
    sampler = Sampler(
        conn.info.dsn,
        stall_slack_seconds=SLACK,
        queue_bound_seconds=queue_bound,
        evidence=dict,
        api_down=lambda since, until: 0.0,
        verdict_interval=2.0,
    )
    sampler.sample(conn)
    return sampler.result.violations["I3"]


def test_a_run_launching_within_its_start_bound_is_not_silent(conn):
    """Past the orphan timeout (300 s by default here) but within its start bound."""
    run_id = claimed(conn, "slow-pull")
    launching(conn, run_id, started_ago=400, bound_after=600)

    assert silent_runs(conn) == []


def test_a_run_launching_past_its_start_bound_is_reported(conn):
    run_id = claimed(conn, "stuck-pull")
    launching(conn, run_id, started_ago=100, bound_after=60)

    [found] = silent_runs(conn)

    assert f"run {run_id} RUNNING and silent for 100s (timeout 60s" in found


def test_a_run_queued_behind_a_launching_run_waits_as_long_as_it_launches(conn):
    """After a long API outage the node starts a backlog of pods at once: a launching run
    keeps its job's only place, bounded by its start bound, and the run queued behind it
    waits that long. Without the launching run holding the place, the same wait is lost."""
    holder = claimed(conn, "holder")
    launching(conn, holder, started_ago=200, bound_after=300)
    queued = queued_behind(conn, holder, due_ago=150)

    assert silent_runs(conn, queue_bound=60) == []

    conn.execute("DELETE FROM pgsched.run_starts WHERE run_id = %s", [holder])
    conn.execute("UPDATE pgsched.job_runs SET heartbeat_at = now() WHERE id = %s", [holder])
    [found] = silent_runs(conn, queue_bound=60)

    assert found.startswith(f"live: run {queued} due and QUEUED for 150s (bound 60s")


def test_a_deferred_launch_back_to_queued_is_legal_and_any_other_way_back_is_not(conn):
    install_run_audit(conn)
    deferred, rewound = claimed(conn, "deferred"), claimed(conn, "rewound")
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'QUEUED', started_at = NULL,"
        " error = 'launch deferred: creating Job x: the API server is unavailable'"
        " WHERE id = %s",
        [deferred],
    )
    # A broken writer: the run was heartbeating (its workload had the lease), and its claim
    # was rewound anyway.
    conn.execute("UPDATE pgsched.job_runs SET heartbeat_at = now() WHERE id = %s", [rewound])
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'QUEUED', started_at = NULL,"
        " error = 'launch deferred: creating Job y: the API server is unavailable'"
        " WHERE id = %s",
        [rewound],
    )

    [found] = terminal_statuses_final(conn)

    assert found.startswith(f"run {rewound}: status RUNNING/None overwritten by QUEUED/None")
