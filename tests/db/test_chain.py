"""Chaining (spec.after): one downstream run per final matching upstream outcome, queued
in the transaction that settles the upstream run, never for an attempt that is retried."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest

from factories import RecordingLauncher, define, reload, runs_of
from pgsched import spec as spec_module
from pgsched.db import connection
from pgsched.engine import chain, dispatch, lease, materialize, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RNG = random.Random(5)
NO_SCHEDULE = "0 0 1 1 *"  # upstreams run by hand in these tests


def finish(conn, job, status, *, at, reason=None):
    """Run the job's next due run to ``status`` (queue one by hand if none is due)."""
    claimed = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed
    if not claimed:
        runs.run_now(conn, job.id, token=f"t-{at.isoformat()}", scheduled_for=at)
        claimed = dispatch.run_once(
            conn, RecordingLauncher(), definition_ids=[job.id], now=at
        ).claimed
    [run] = claimed
    assert lease.finish(conn, lease.Lease(run.id, run.lease_token), status, reason=reason, now=at)
    return run


def chained(conn, job):
    return [row for row in runs_of(conn, job) if row["trigger"] == "upstream"]


def replay_settle(conn, run_ids, *, at):
    """A settle that runs again over runs already settled (a crash, a second leader)."""
    conn.execute(
        "UPDATE pgsched.job_runs SET settled_at = NULL WHERE id = ANY(%s)", [list(run_ids)]
    )
    return settle.run_once(conn, now=at, rng=RNG)


def test_a_successful_upstream_run_queues_exactly_one_downstream_run(conn):
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    load = define(conn, "load", after=[{"scheduledJob": "extract"}], now=T0)
    assert load.schedule_kind == "none" and load.next_run_at is None

    upstream = finish(conn, extract, "COMPLETED", at=T0)
    assert chained(conn, load) == []  # nothing before the upstream run is settled
    result = settle.run_once(conn, now=T0 + timedelta(seconds=1), rng=RNG)

    [down] = chained(conn, load)
    assert (down["status"], down["upstream_run_id"]) == ("QUEUED", upstream.id)
    assert down["scheduled_for"] == T0 + timedelta(seconds=1)
    assert [c.run_id for c in result.chained] == [down["id"]]
    # A replayed settle inserts nothing: the unique key, not a check in Python.
    replay_settle(conn, [upstream.id], at=T0 + timedelta(seconds=2))
    assert [row["id"] for row in chained(conn, load)] == [down["id"]]
    # The chained run is claimed like any other run.
    [claimed] = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[load.id], now=T0 + timedelta(seconds=3)
    ).claimed
    assert claimed.id == down["id"] and claimed.upstream_run_id == upstream.id


def test_a_retried_attempt_triggers_nothing_and_the_final_attempt_triggers_once(conn):
    flaky = define(
        conn,
        "flaky",
        schedule=NO_SCHEDULE,
        retryPolicy={
            "maxAttempts": 3,
            "retryOn": ["NonZeroExit"],
            "backoff": {"initialSeconds": 1, "jitter": 0},
        },
        now=T0,
    )
    on_failure = define(
        conn, "alert", after=[{"scheduledJob": "flaky", "outcome": "Failed"}], now=T0
    )
    on_finish = define(
        conn, "report", after=[{"scheduledJob": "flaky", "outcome": "Finished"}], now=T0
    )
    on_success = define(conn, "publish", after=[{"scheduledJob": "flaky"}], now=T0)
    at = T0
    attempts = []
    for _ in range(3):
        attempts.append(finish(conn, flaky, "FAILED", reason="NonZeroExit", at=at))
        settle.run_once(conn, now=at, rng=RNG)
        at += timedelta(minutes=1)  # past the retry's backoff
        if len(attempts) < 3:
            assert chained(conn, on_failure) == [] and chained(conn, on_finish) == []
    replay_settle(conn, [run.id for run in attempts], at=at + timedelta(seconds=1))

    assert [run.attempt for run in attempts] == [1, 2, 3]
    for job in (on_failure, on_finish):
        [down] = chained(conn, job)
        assert down["upstream_run_id"] == attempts[-1].id
    assert chained(conn, on_success) == []


def test_cancelled_upstream_runs_trigger_nothing(conn):
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    report = define(
        conn, "report", after=[{"scheduledJob": "extract", "outcome": "Finished"}], now=T0
    )
    finish(conn, extract, "CANCELLED", reason="Cancelled", at=T0)
    settle.run_once(conn, now=T0 + timedelta(seconds=1), rng=RNG)
    assert chained(conn, report) == []


def test_a_suspended_downstream_records_the_chained_occurrence_as_skipped(conn):
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    load = define(conn, "load", after=[{"scheduledJob": "extract"}], suspend=True, now=T0)
    upstream = finish(conn, extract, "COMPLETED", at=T0)
    settle.run_once(conn, now=T0 + timedelta(seconds=1), rng=RNG)
    [down] = chained(conn, load)
    assert (down["status"], down["reason"], down["upstream_run_id"]) == (
        "SKIPPED",
        "Suspended",
        upstream.id,
    )
    assert down["settled_at"] is not None


def test_fan_in_all_runs_once_each_upstream_has_a_final_run_since_the_last_chained_run(conn):
    a = define(conn, "a", schedule=NO_SCHEDULE, now=T0)
    b = define(conn, "b", schedule=NO_SCHEDULE, now=T0)
    join = define(
        conn,
        "join",
        after=[{"scheduledJob": "a"}, {"scheduledJob": "b", "outcome": "Finished"}],
        afterMode="All",
        now=T0,
    )
    step = timedelta(minutes=1)

    def both_settle(job, status, at, reason=None):
        run = finish(conn, job, status, at=at, reason=reason)
        settle.run_once(conn, now=at + timedelta(seconds=1), rng=RNG)
        return run

    # 12:00 a succeeds, 12:01 a succeeds again: b has not run, join waits.
    both_settle(a, "COMPLETED", T0)
    both_settle(a, "COMPLETED", T0 + step)
    assert chained(conn, join) == []
    # 12:02 b fails (on: Finished matches): the set is complete, join runs once.
    b1 = both_settle(b, "FAILED", T0 + 2 * step, reason="NonZeroExit")
    [first] = chained(conn, join)
    assert first["upstream_run_id"] == b1.id
    # 12:03 b succeeds: a has nothing new since join's run, so join waits again.
    both_settle(b, "COMPLETED", T0 + 3 * step)
    assert len(chained(conn, join)) == 1
    # 12:04 a succeeds: both have a new final run, join runs a second time.
    a3 = both_settle(a, "COMPLETED", T0 + 4 * step)
    second = chained(conn, join)[1]
    assert second["upstream_run_id"] == a3.id
    replay_settle(conn, [a3.id, b1.id], at=T0 + 5 * step)
    assert len(chained(conn, join)) == 2


def test_a_chained_run_is_retried_with_its_upstream_run_kept(conn):
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    load = define(
        conn,
        "load",
        after=[{"scheduledJob": "extract"}],
        retryPolicy={"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 1, "jitter": 0}},
        now=T0,
    )
    upstream = finish(conn, extract, "COMPLETED", at=T0)
    settle.run_once(conn, now=T0, rng=RNG)
    finish(conn, load, "FAILED", reason="NonZeroExit", at=T0 + timedelta(seconds=5))
    settle.run_once(conn, now=T0 + timedelta(seconds=6), rng=RNG)
    first, retry = runs_of(conn, load)
    assert (retry["trigger"], retry["retry_of"], retry["upstream_run_id"]) == (
        "retry",
        first["id"],
        upstream.id,
    )


def test_a_definition_without_schedule_is_never_materialized(conn):
    load = define(conn, "load", after=[{"scheduledJob": "extract"}], now=T0)
    materialize.run_once(conn, now=T0 + timedelta(days=3))
    assert runs_of(conn, load) == []
    assert reload(conn, load).next_run_at is None


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [
        ({"a": ["a"]}, "a → a"),
        ({"b": ["a"], "a": ["b"]}, "a → b → a"),
        ({"b": ["c"], "c": ["a"], "a": ["b"]}, "a → b → c → a"),
    ],
)
def test_a_cycle_is_rejected_when_applied_with_a_message_naming_it(conn, edges, cycle):
    for name, upstreams in list(edges.items())[:-1]:
        define(conn, name, after=[{"scheduledJob": u} for u in upstreams], now=T0)
    last, upstreams = list(edges.items())[-1]
    with pytest.raises(chain.CycleError) as caught:
        define(conn, last, after=[{"scheduledJob": u} for u in upstreams], now=T0)
    assert cycle in str(caught.value) and str(caught.value).startswith("spec.after: ")
    # Nothing of the rejected apply was stored.
    row = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_definitions WHERE name = %s", [last]
    ).fetchone()
    assert row["n"] == (1 if last in dict(list(edges.items())[:-1]) else 0)


def test_two_concurrent_applies_closing_a_cycle_are_serialized_and_one_is_rejected(dsn, conn):
    # The first apply holds the namespace lock until it commits; the second, started
    # meanwhile, must see its edge.
    blocker = connection.connect(dsn)
    outcome: list[object] = []
    try:
        blocker.execute("BEGIN")
        blocker.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('chain-namespace:default', 0))"
        )

        def apply(name, upstream):
            with connection.connect(dsn) as own:
                try:
                    define(own, name, after=[{"scheduledJob": upstream}], now=T0)
                    outcome.append(name)
                except chain.CycleError as error:
                    outcome.append(error)

        threads = [
            threading.Thread(target=apply, args=("a", "b")),
            threading.Thread(target=apply, args=("b", "a")),
        ]
        for thread in threads:
            thread.start()
        blocker.execute("COMMIT")
        for thread in threads:
            thread.join(timeout=20)
    finally:
        blocker.close()
    errors = [item for item in outcome if isinstance(item, chain.CycleError)]
    assert len(outcome) == 2 and len(errors) == 1
    assert "is a cycle" in str(errors[0])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"after": "extract"}, "spec.after: must be a list of upstreams"),
        ({"after": [{"scheduledJob": "Bad_Name"}]}, "spec.after[0].scheduledJob:"),
        (
            {"after": [{"scheduledJob": "x", "outcome": "Done"}]},
            "spec.after[0].outcome: 'Done' is not one of",
        ),
        (
            {"after": [{"scheduledJob": "x"}, {"scheduledJob": "x"}]},
            "spec.after[1].scheduledJob: 'x' is named twice",
        ),
        ({"schedule": "* * * * *", "afterMode": "All"}, "spec.afterMode: is set but"),
        ({}, "or none, with spec.after"),
        (
            {"after": [{"scheduledJob": "x", True: "Failed"}]},
            "(YAML reads `on` as true): use outcome",
        ),
    ],
)
def test_bad_after_fields_are_rejected_naming_the_field(spec, message):
    with pytest.raises(spec_module.SpecError) as caught:
        spec_module.parse(spec, anchor=T0, now=T0)
    assert message in str(caught.value)


def test_links_show_missing_upstreams_and_the_chain_both_ways(conn):
    load = define(
        conn, "load", after=[{"scheduledJob": "extract"}, {"scheduledJob": "clean"}], now=T0
    )
    extract = define(conn, "extract", schedule=NO_SCHEDULE, now=T0)
    links = chain.links(conn, load.id, namespace="default", name="load")
    assert [(u.scheduled_job, u.found) for u in links.upstreams] == [
        ("clean", False),
        ("extract", True),
    ]
    assert chain.links(conn, extract.id, namespace="default", name="extract").downstreams == [
        "load"
    ]
    upstream = finish(conn, extract, "COMPLETED", at=T0)
    settle.run_once(conn, now=T0, rng=RNG)
    [down] = chained(conn, load)
    [item] = chain.triggered(conn, [upstream.id])[upstream.id]
    assert (item.run_id, item.scheduled_job, item.status) == (down["id"], "load", "QUEUED")
    assert chain.upstream_definitions(conn, [down["id"]]) == [extract.id]


def test_the_chain_example_applies_in_any_order_and_chains_as_documented(conn):
    import pathlib

    import yaml

    path = pathlib.Path(__file__).parents[2] / "examples" / "chain-extract-load.yaml"
    documents = {
        doc["metadata"]["name"]: doc["spec"] for doc in yaml.safe_load_all(path.read_text())
    }
    jobs = {name: define(conn, name, now=T0, **spec) for name, spec in reversed(documents.items())}
    assert jobs["load"].schedule_kind == "none" and jobs["report"].after_mode == "All"
    upstream = finish(conn, jobs["extract"], "COMPLETED", at=T0)
    settle.run_once(conn, now=T0, rng=RNG)
    [load_run] = chained(conn, jobs["load"])
    assert load_run["upstream_run_id"] == upstream.id


def test_fan_in_upstreams_settled_concurrently_by_two_settlers_fire_once_per_round(dsn, conn):
    a = define(conn, "a", schedule=NO_SCHEDULE, maxConcurrentRuns=50, now=T0)
    b = define(conn, "b", schedule=NO_SCHEDULE, maxConcurrentRuns=50, now=T0)
    join = define(
        conn, "join", after=[{"scheduledJob": "a"}, {"scheduledJob": "b"}], afterMode="All", now=T0
    )
    rounds = 10
    for index in range(rounds):
        at = T0 + timedelta(minutes=index)
        finish(conn, a, "COMPLETED", at=at)
        finish(conn, b, "COMPLETED", at=at)
        barrier = threading.Barrier(2)

        def settler(barrier=barrier, at=at):
            with connection.connect(dsn) as own:
                barrier.wait()
                while settle.run_once(own, now=at, batch_size=1, rng=RNG).settled:
                    pass

        threads = [threading.Thread(target=settler) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert len(chained(conn, join)) == index + 1


def test_chained_runs_get_starting_deadlines_caps_and_cancellation_like_any_run(conn):
    extract = define(conn, "extract", schedule=NO_SCHEDULE, maxConcurrentRuns=5, now=T0)
    load = define(
        conn, "load", after=[{"scheduledJob": "extract"}], startingDeadlineSeconds=30, now=T0
    )
    first = finish(conn, extract, "COMPLETED", at=T0)
    second = finish(conn, extract, "COMPLETED", at=T0 + timedelta(seconds=1))
    settle.run_once(conn, now=T0 + timedelta(seconds=2), rng=RNG)
    one, two = chained(conn, load)
    assert one["deadline_at"] == T0 + timedelta(seconds=32)
    # maxConcurrentRuns (1): one claimed, the other waits QUEUED.
    claimed = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[load.id], now=T0 + timedelta(seconds=3)
    ).claimed
    assert [run.upstream_run_id for run in claimed] == [first.id]
    outcome = runs.cancel_definition(conn, load.id, by=runs.BY_CLI, why="test")
    assert [run.id for run in outcome.cancelled] == [two["id"]]
    assert [run.upstream_run_id for run in outcome.asked_to_stop] == [first.id]
    assert second.id == two["upstream_run_id"]


def test_the_cycle_check_walks_a_chain_of_thousands_without_recursing():
    graph = {f"j{index}": [f"j{index + 1}"] for index in range(5000)}
    assert chain.find_cycle(graph, "j0") is None
    graph["j5000"] = ["j0"]
    found = chain.find_cycle(graph, "j0")
    assert found is not None and len(found) == 5002 and found[0] == found[-1] == "j0"
    message = chain.describe_cycle(found)
    assert message.startswith("spec.after: j0 → j1") and "… 4991 more …" in message
    assert len(message) < 400
