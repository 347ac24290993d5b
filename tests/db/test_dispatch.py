"""Dispatch: SKIP LOCKED claims under per-definition caps, launch outside the transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from bench import queries as bench_queries
from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, lease, materialize, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def queue(conn, job, count, *, at=T0, trigger="manual"):
    for index in range(count):
        runs.run_now(
            conn,
            job.id,
            token=f"{job.name}-{at.isoformat()}-{index}",
            trigger=trigger,
            scheduled_for=at,
        )


def count_status(conn, job, status):
    return sum(1 for row in runs_of(conn, job) if row["status"] == status)


def test_claims_due_runs_and_launches_each_once_with_a_lease(conn):
    job = define(conn, maxConcurrentRuns=5, now=T0)
    queue(conn, job, 3)
    launcher = RecordingLauncher()

    result = dispatch.run_once(conn, launcher, now=T0 + timedelta(seconds=1))

    assert len(result.claimed) == 3 and result.launched == 3
    assert sorted(run.id for run in launcher.launched) == sorted(run.id for run in result.claimed)
    rows = runs_of(conn, job)
    assert {row["status"] for row in rows} == {"RUNNING"}
    assert len({row["lease_token"] for row in rows}) == 3
    assert {row["k8s_job_name"] for row in rows} == {f"job-{row['id']}" for row in rows}


def test_runs_scheduled_in_the_future_are_not_claimed(conn):
    job = define(conn, maxConcurrentRuns=5, now=T0)
    queue(conn, job, 2, at=T0 + timedelta(minutes=5))
    assert dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed == []


def test_cap_limits_running_runs_and_the_rest_stay_queued(conn):
    job = define(conn, maxConcurrentRuns=2, now=T0)
    queue(conn, job, 5)
    first = dispatch.run_once(conn, RecordingLauncher(), now=T0)
    second = dispatch.run_once(conn, RecordingLauncher(), now=T0)
    assert len(first.claimed) == 2 and second.claimed == []
    assert job.id in second.at_cap
    assert (count_status(conn, job, "RUNNING"), count_status(conn, job, "QUEUED")) == (2, 3)


def test_a_finished_run_makes_room_for_a_queued_one(conn):
    job = define(conn, maxConcurrentRuns=1, now=T0)
    queue(conn, job, 2)
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    lease.finish(
        conn, lease.Lease(run.id, run.lease_token), "COMPLETED", now=T0 + timedelta(seconds=5)
    )
    [following] = dispatch.run_once(
        conn, RecordingLauncher(), now=T0 + timedelta(seconds=6)
    ).claimed
    assert following.id != run.id


def test_overshoot_keeps_a_crowded_definition_from_starving_the_batch(conn):
    crowded = define(conn, "crowded", maxConcurrentRuns=1, now=T0)
    others = [define(conn, f"other-{index}", maxConcurrentRuns=1, now=T0) for index in range(3)]
    # Ten runs ahead of everyone else: more than a batch of 4, fewer than 4 x 4 candidates.
    queue(conn, crowded, 10, at=T0 - timedelta(minutes=1))
    for job in others:
        queue(conn, job, 1)
    result = dispatch.run_once(conn, RecordingLauncher(), batch_size=4, now=T0)
    assert {run.definition_id for run in result.claimed} == {
        crowded.id,
        *(job.id for job in others),
    }


def test_without_overshoot_the_crowded_definition_would_fill_the_candidate_pool(conn):
    crowded = define(conn, "crowded", maxConcurrentRuns=1, now=T0)
    other = define(conn, "other", maxConcurrentRuns=1, now=T0)
    queue(conn, crowded, 10, at=T0 - timedelta(minutes=1))
    queue(conn, other, 1)
    result = dispatch.run_once(conn, RecordingLauncher(), batch_size=4, overshoot=1, now=T0)
    assert {run.definition_id for run in result.claimed} == {crowded.id}


def test_skip_policy_records_scheduled_runs_that_find_the_definition_at_cap(conn):
    job = define(conn, schedule="* * * * *", concurrencyPolicy="Skip", now=T0)
    materialize.run_once(conn, now=T0 + timedelta(minutes=1, seconds=1))
    dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(minutes=1, seconds=1))
    materialize.run_once(conn, now=T0 + timedelta(minutes=2, seconds=1))
    result = dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(minutes=2, seconds=1))
    assert len(result.skipped) == 1
    last = runs_of(conn, job)[-1]
    assert (last["status"], last["reason"]) == ("SKIPPED", "ConcurrencyPolicy")


def test_replace_policy_asks_the_oldest_run_to_stop_once(conn):
    job = define(
        conn, schedule="* * * * *", concurrencyPolicy="Replace", maxConcurrentRuns=2, now=T0
    )
    for minute in (1, 2, 3):
        at = T0 + timedelta(minutes=minute, seconds=1)
        materialize.run_once(conn, now=at)
        result = dispatch.run_once(conn, RecordingLauncher(), now=at)
    oldest = runs_of(conn, job)[0]
    assert result.replace_requested == [oldest["id"]]
    # The next tick must not cancel the second run while the first is still stopping.
    again = dispatch.run_once(conn, RecordingLauncher(), now=T0 + timedelta(minutes=3, seconds=2))
    assert again.replace_requested == []
    assert [row["cancel_requested"] for row in runs_of(conn, job)] == [True, False, False]


def test_launch_failure_fails_the_run_and_settle_retries_it_as_a_new_row(conn):
    job = define(
        conn,
        maxConcurrentRuns=5,
        retryPolicy={"backoff": {"initialSeconds": 30, "jitter": 0}},
        now=T0,
    )
    queue(conn, job, 1)
    [queued] = runs_of(conn, job)
    launcher = RecordingLauncher(fail_ids={queued["id"]})

    result = dispatch.run_once(conn, launcher, now=T0)
    settled = settle.run_once(conn, now=T0 + timedelta(seconds=1))

    assert result.launch_failed == [queued["id"]]
    failed, retry = runs_of(conn, job)
    assert (failed["status"], failed["reason"]) == ("FAILED", "LaunchFailed")
    assert "refusing to launch" in failed["error"]
    assert (retry["status"], retry["trigger"], retry["attempt"], retry["retry_of"]) == (
        "QUEUED",
        "retry",
        2,
        failed["id"],
    )
    assert retry["scheduled_for"] == T0 + timedelta(seconds=31)
    assert [item.retry_id for item in settled.retried] == [retry["id"]]


def test_restricting_dispatch_to_one_definition(conn):
    mine = define(conn, "mine", now=T0)
    theirs = define(conn, "theirs", now=T0)
    queue(conn, mine, 1)
    queue(conn, theirs, 1)
    result = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[mine.id], now=T0)
    assert [run.definition_id for run in result.claimed] == [mine.id]


def test_runs_of_a_deleted_definition_are_not_claimed(conn):
    from pgsched.engine import definitions

    job = define(conn, now=T0)
    queue(conn, job, 1)
    conn.execute("UPDATE pgsched.job_definitions SET deleted_at = now() WHERE id = %s", [job.id])
    assert dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed == []
    assert definitions.get(conn, job.id).deleted_at is not None


def test_run_now_is_idempotent_per_token(conn):
    job = define(conn, now=T0)
    first = runs.run_now(conn, job.id, token="deploy-42")
    second = runs.run_now(conn, job.id, token="deploy-42")
    assert first.created and not second.created
    assert first.run.id == second.run.id
    assert len(runs_of(conn, job)) == 1


def test_further_definitions_are_tried_not_waited_for(conn, dsn):
    """Round two of the claim only tries locks: a definition another dispatcher is
    claiming is skipped this time instead of making this claim wait."""
    from pgsched.db import connection

    crowded = define(conn, "crowded", maxConcurrentRuns=1, now=T0)
    other = define(conn, "other", maxConcurrentRuns=1, now=T0)
    queue(conn, crowded, 10, at=T0 - timedelta(minutes=1))
    queue(conn, other, 1)
    with connection.connect(dsn) as rival:
        rival.execute("BEGIN")
        rival.execute("SELECT pgsched.lock_definitions_for_dispatch(%s::uuid[])", [[other.id]])
        result = dispatch.claim(conn, batch_size=4, now=T0)  # would hang if it waited
        assert {run.definition_id for run in result.claimed} == {crowded.id}
        rival.execute("ROLLBACK")
    later = dispatch.claim(conn, batch_size=4, now=T0)
    assert {run.definition_id for run in later.claimed} == {other.id}


def test_a_claim_locks_only_the_definitions_it_needs_when_caps_allow(conn):
    jobs = [define(conn, f"job-{index}", maxConcurrentRuns=5, now=T0) for index in range(20)]
    for job in jobs:
        queue(conn, job, 1)
    conn.execute("BEGIN")
    try:
        result = dispatch.claim(conn, batch_size=5, now=T0)
        held = conn.execute(bench_queries.get("claim_locks_held")).fetchone()["n"]
    finally:
        conn.execute("ROLLBACK")
    assert len(result.claimed) == 5
    assert held == 5, "the 15 further candidates' definitions need no lock when the batch is full"


def test_by_default_round_one_waits_for_a_definition_another_dispatcher_holds(conn, dsn):
    """The seed's rule: a lock on each of the batch's definitions, waited for in order."""
    import threading

    from pgsched.db import connection

    busy = define(conn, "busy", maxConcurrentRuns=5, now=T0)
    free = define(conn, "free", maxConcurrentRuns=5, now=T0)
    queue(conn, busy, 2, at=T0 - timedelta(minutes=1))
    queue(conn, free, 2)
    outcome: dict[str, dispatch.DispatchResult] = {}
    with connection.connect(dsn) as rival:
        rival.execute("BEGIN")
        rival.execute("SELECT pgsched.lock_definitions_for_dispatch(%s::uuid[])", [[busy.id]])
        waiter = threading.Thread(
            target=lambda: outcome.setdefault("result", dispatch.claim(conn, batch_size=4, now=T0))
        )
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive(), "the claim must wait for the batch's definition lock"
        rival.execute("ROLLBACK")
        waiter.join(timeout=10)
    assert len(outcome["result"].claimed) == 4


def test_with_try_locks_a_definition_another_dispatcher_holds_is_skipped(conn, dsn):
    """Round one tries its locks too: two dispatchers whose batches share a definition
    claim side by side instead of taking turns."""
    from pgsched.db import connection

    busy = define(conn, "busy", maxConcurrentRuns=5, now=T0)
    free = define(conn, "free", maxConcurrentRuns=5, now=T0)
    queue(conn, busy, 2, at=T0 - timedelta(minutes=1))
    queue(conn, free, 2)
    with connection.connect(dsn) as rival:
        rival.execute("BEGIN")
        rival.execute("SELECT pgsched.lock_definitions_for_dispatch(%s::uuid[])", [[busy.id]])
        result = dispatch.claim(conn, batch_size=4, now=T0, try_locks=True)  # no waiting
        rival.execute("ROLLBACK")
    assert {run.definition_id for run in result.claimed} == {free.id}
    assert count_status(conn, busy, "QUEUED") == 2


@pytest.mark.parametrize("try_locks", [False, True], ids=["wait", "try"])
def test_when_every_wanted_definition_is_locked_the_claim_waits_then_counts(conn, dsn, try_locks):
    """With nothing granted, even the try mode waits (in order) for the rival,
    then reads the count the rival committed — so the cap holds (I2)."""
    import threading

    from pgsched.db import connection

    job = define(conn, "solo", maxConcurrentRuns=1, now=T0)
    queue(conn, job, 2)
    outcome: dict[str, dispatch.DispatchResult] = {}
    with connection.connect(dsn) as rival:
        rival.execute("BEGIN")
        rival.execute("SELECT pgsched.lock_definitions_for_dispatch(%s::uuid[])", [[job.id]])
        rival_claim = dispatch.claim(rival, batch_size=1, overshoot=1, now=T0)

        def waiting_claim() -> None:
            outcome["result"] = dispatch.claim(conn, batch_size=4, now=T0, try_locks=try_locks)

        waiter = threading.Thread(target=waiting_claim)
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive(), "the claim must wait for the lock, not skip everything"
        rival.execute("COMMIT")
        waiter.join(timeout=10)
    assert len(rival_claim.claimed) == 1
    result = outcome["result"]
    assert result.claimed == [] and job.id in result.at_cap
    assert count_status(conn, job, "RUNNING") == 1 and count_status(conn, job, "QUEUED") == 1


def test_a_parallel_launcher_launches_a_batch_at_once_and_failures_still_end_their_runs(conn):
    """A launcher with ``parallelism`` gets that many launches in flight (a stampede of due
    runs is not created one round trip after another); failures are recorded as before."""
    import time

    from factories import RecordingLauncher

    class SlowLauncher(RecordingLauncher):
        parallelism = 4

        def launch(self, run, definition):
            time.sleep(0.2)  # one API round trip
            return super().launch(run, definition)

    job = define(conn, maxConcurrentRuns=8, retryPolicy={"maxAttempts": 1}, now=T0)
    queue(conn, job, 8)
    launcher = SlowLauncher()
    doomed = min(row["id"] for row in runs_of(conn, job))
    launcher.fail_ids = {doomed}
    started = time.monotonic()
    result = dispatch.run_once(conn, launcher, batch_size=8, now=T0)
    took = time.monotonic() - started
    assert took < 1.0, f"8 launches of 0.2 s with 4 in flight took {took:.2f}s (serial: 1.6 s)"
    assert result.launched == 7 and result.launch_failed == [doomed]
    statuses = {
        row["id"]: (row["status"], row["reason"], row["k8s_job_name"]) for row in runs_of(conn, job)
    }
    assert statuses[doomed][:2] == ("FAILED", "LaunchFailed")
    assert all(
        status == "RUNNING" and name == f"job-{run_id}"
        for run_id, (status, _, name) in statuses.items()
        if run_id != doomed
    )


def test_the_claim_function_has_no_mode_that_skips_its_locks(conn):
    """0005's test-only lock_mode 'none' is gone (migration 0009): the self-tests plant an
    unlocked copy themselves (bench/planted.py); the product's claim always locks."""
    with pytest.raises(psycopg.errors.RaiseException, match="lock_mode must be wait or try"):
        conn.execute("SELECT * FROM pgsched.claim_for_dispatch(10, 4, NULL, NULL, 'none')")


class DefinitionRecorder:
    """Records the definition each run was launched with."""

    def __init__(self) -> None:
        self.launched: list[tuple[int, object]] = []

    def launch(self, run, definition):
        self.launched.append((run.id, definition))
        return f"job-{run.id}"


def template(image):
    return {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}}


def test_an_edited_definition_is_launched_as_edited_by_the_next_claim(conn):
    """The tick keeps launched definitions between ticks (dispatch.Owners); an edit of the
    template or the cap, even one stored at the same instant, is what the next claim uses."""
    job = define(conn, maxConcurrentRuns=1, jobTemplate=template("app:1"), now=T0)
    queue(conn, job, 4)
    owners, launcher = dispatch.Owners(), DefinitionRecorder()

    [first] = dispatch.run_once(conn, launcher, now=T0, owners=owners).claimed
    lease.finish(conn, lease.Lease(first.id, first.lease_token), "COMPLETED", now=T0)
    [second] = dispatch.run_once(conn, launcher, now=T0, owners=owners).claimed
    lease.finish(conn, lease.Lease(second.id, second.lease_token), "COMPLETED", now=T0)
    # Unchanged between the two claims: the second launch used the kept definition.
    assert launcher.launched[1][1] is launcher.launched[0][1]

    define(conn, generation=2, maxConcurrentRuns=2, jobTemplate=template("app:2"), now=T0)
    third = dispatch.run_once(conn, launcher, now=T0, owners=owners).claimed

    assert len(third) == 2  # the new cap
    images = [
        definition.spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]
        for _, definition in launcher.launched
    ]
    assert images == ["app:1", "app:1", "app:2", "app:2"]
    assert launcher.launched[2][1].max_concurrent_runs == 2


def test_a_definitions_version_moves_with_edits_not_with_materialization(conn):
    job = define(conn, schedule="* * * * *", now=T0)
    version = job.version
    materialize.run_once(conn, now=T0 + timedelta(minutes=3))
    materialized = conn.execute(
        "SELECT version, next_run_at, last_scheduled_for FROM pgsched.job_definitions"
        " WHERE id = %s",
        [job.id],
    ).fetchone()
    assert materialized["last_scheduled_for"] is not None  # materialize did write the row
    assert materialized["version"] == version
    suspended = define(conn, generation=2, schedule="* * * * *", suspend=True, now=T0)
    assert suspended.version == version + 1
