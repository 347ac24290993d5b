"""The order watches of runs follow (``kubectl get runs -w``), against the real database.

A watch resumes from the last resourceVersion it saw and must miss nothing. Writers cannot
number their own changes: the transaction that recorded a change first may commit last.
The sequencer gives committed changes their places, so once a watcher has seen a place,
every change before it is visible.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from db.test_notifications import claimed_run, end_run
from factories import define
from pgsched.db import connection
from pgsched.k8s.runs_api import changes

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NEVER_DUE = "0 3 1 1 *"


def seen_after(runs_reader, after, namespaces=("team",)):
    found = runs_reader.changes(
        namespaces=list(namespaces), scheduled_job=None, after=after, limit=100
    )
    return [(change.run_id, change.created) for change in found]


def change_ids(conn, run_id):
    rows = conn.execute(
        "SELECT id FROM pgsched.run_changes WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()
    return [row["id"] for row in rows]


def test_a_change_committed_late_comes_after_what_a_watcher_saw(conn, dsn, runs_reader):
    a = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    b = define(conn, "b", namespace="team", schedule=NEVER_DUE, now=T0)
    early, late = claimed_run(conn, a, T0), claimed_run(conn, b, T0)
    changes.sequence(conn)
    start = runs_reader.versions().current

    with connection.connect(dsn, application_name="slow-writer") as slow, slow.transaction():
        end_run(slow, early, "COMPLETED", T0 + timedelta(seconds=5))  # recorded first...
        end_run(conn, late, "FAILED", T0 + timedelta(seconds=5))
        assert changes.sequence(conn).placed >= 1
        seen = runs_reader.versions().current
        assert set(seen_after(runs_reader, start)) == {(late.id, False)}
    # ...and committed last.
    assert change_ids(conn, early.id)[-1] < change_ids(conn, late.id)[-1]
    # Numbered by the writers, the early change would sit before `seen`, and a watcher
    # resuming from there would never get it. Placed after its commit, it comes after.
    changes.sequence(conn)
    assert set(seen_after(runs_reader, seen)) == {(early.id, False)}


def one_life(conn, runs_reader, status):
    """A run of a new ScheduledJob queued, claimed and ended ``status``, its changes
    placed; the run, and the version before its first change."""
    job = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    start = runs_reader.versions().current
    run = claimed_run(conn, job, T0)
    end_run(conn, run, status, T0 + timedelta(seconds=1))
    changes.sequence(conn)
    return run, start


def test_a_runs_creation_is_told_from_its_later_changes(conn, runs_reader):
    run, start = one_life(conn, runs_reader, "COMPLETED")
    told = seen_after(runs_reader, start)
    assert told[0] == (run.id, True)  # queued: the run is new
    assert told[1:] and all(created is False for _, created in told[1:])  # claimed, ended


def test_each_status_change_carries_the_status_it_left(conn, runs_reader):
    """What a watch by phase needs to send a run leaving the phase as DELETED."""
    _, start = one_life(conn, runs_reader, "FAILED")
    found = runs_reader.changes(namespaces=["team"], scheduled_job=None, after=start, limit=100)
    moves = [(c.previous, c.status) for c in found if c.status in ("QUEUED", "RUNNING", "FAILED")]
    assert moves == [(None, "QUEUED"), ("QUEUED", "RUNNING"), ("RUNNING", "FAILED")]


def test_namespaces_are_kept_apart(conn, runs_reader):
    mine = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    theirs = define(conn, "a", namespace="other", schedule=NEVER_DUE, now=T0)
    start = runs_reader.versions().current
    claimed_run(conn, theirs, T0)
    run = claimed_run(conn, mine, T0)
    changes.sequence(conn)
    assert {run_id for run_id, _ in seen_after(runs_reader, start)} == {run.id}


def test_one_sequencer_at_a_time(conn, dsn):
    with connection.connect(dsn, application_name="other-replica") as other, other.transaction():
        other.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock("
            "pg_catalog.hashtextextended('pgsched:run-change-sequencer', 0))"
        )
        assert changes.sequence(conn) == changes.Sequenced(0, busy=True)
    assert not changes.sequence(conn).busy


def test_pruned_changes_make_older_versions_expire(conn, runs_reader):
    job = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    claimed_run(conn, job, T0)
    changes.sequence(conn)
    placed = runs_reader.versions().current
    assert placed > 0
    assert changes.prune(conn).pruned_through is None  # nothing is 15 minutes old
    pruned = changes.prune(conn, keep_seconds=0)
    assert pruned.pruned_through == placed
    versions = runs_reader.versions()
    assert versions.pruned_through == placed
    assert versions.current == placed  # the order goes on from where it was
    assert seen_after(runs_reader, placed) == []
