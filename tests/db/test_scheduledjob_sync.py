"""Syncing a ScheduledJob into its definition, and what it asks Kubernetes to be told
(``pgsched.k8s.scheduledjobs.scheduledjobs.sync``), against the real database. The writes themselves
are exercised on a real API server (tests/cluster/test_operator_fleet.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from pgsched.db import connection
from pgsched.engine import definitions, runs
from pgsched.k8s.client import api
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.client.finalizers import FINALIZER
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjobs
from plugins.no_requests import NoRequests


class NoNamespaceToRead:
    """The API server as sync meets it here. sync asks it one thing, and only for a
    ScheduledJob being deleted: whether its whole namespace is going (then its runs are
    cancelled by NamespaceDeletion). No namespace can be read here, so a deletion is the
    ScheduledJob's own; any other request fails loudly."""

    endings = NamespaceEndings()  # none seen going

    def get(self, path: str, **params: object) -> dict[str, object]:
        assert path.startswith("/api/v1/namespaces/"), path
        raise api.ApiError("GET", path, 404, {"reason": "NotFound", "message": "not here"})


@pytest.fixture
def context(dsn: str) -> Iterator[scheduledjobs.Context]:
    with connection.pool(dsn, name="pgsched-test-sync", max_size=2) as pool:
        yield scheduledjobs.Context(
            pool=pool,
            kube=NoNamespaceToRead(),
            publisher=Publisher(None),
            clock=lambda: None,  # type: ignore[arg-type]
        )


def body(
    name: str = "nightly",
    *,
    uid: str | None = None,
    generation: int = 1,
    observed: int | None = None,
    finalizer: bool = False,
    deleting: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "jobs",
        "uid": uid or str(uuid.uuid4()),
        "generation": generation,
        "resourceVersion": "100",
        "creationTimestamp": "2026-12-01T00:00:00Z",
        "finalizers": [FINALIZER] if finalizer else [],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}},
            **spec,
        },
        "status": {} if observed is None else {"observedGeneration": observed},
    }


def row_version(conn: connection.Connection, uid: str) -> str:
    row = conn.execute(
        "SELECT xmin::text AS v FROM pgsched.job_definitions WHERE id = %s", (uid,)
    ).fetchone()
    assert row is not None
    return str(row["v"])


def test_a_new_scheduledjob_is_stored_and_asks_for_finalizer_status_and_its_event(context, conn):
    new = body()
    synced = scheduledjobs.sync(context, new, revalidate=True)

    stored = definitions.get(conn, uuid.UUID(new["metadata"]["uid"]))
    assert stored is not None and stored.generation == 1 and stored.schedule == "0 3 * * *"
    assert synced.writes is not None and synced.retry_in is None
    assert synced.writes.add_finalizer and synced.writes.status
    assert [note.reason for note in synced.writes.events] == ["Scheduled"]


def test_the_echo_of_its_finalizer_write_asks_for_nothing_once_the_generation_is_published(
    context, conn
):
    """The finalizer patch's MODIFIED event still shows no status for the generation; with
    a fleet waiting for the API budget it is synced minutes after the status and Event were
    written. It must not ask for them again (it did: a second status patch and Event per
    ScheduledJob)."""
    new = body()
    scheduledjobs.sync(context, new, revalidate=True)
    uid = uuid.UUID(new["metadata"]["uid"])
    definitions.mark_published(conn, uid, 1)  # what the writer records after writing
    echo = body(uid=str(uid), finalizer=True)  # status still without observedGeneration

    assert scheduledjobs.sync(context, echo, revalidate=False).writes is None
    assert scheduledjobs.sync(context, echo, revalidate=True).writes is None


def test_a_new_generation_is_published_even_if_an_older_one_was(context, conn):
    new = body()
    scheduledjobs.sync(context, new, revalidate=True)
    uid = new["metadata"]["uid"]
    definitions.mark_published(conn, uuid.UUID(uid), 1)
    changed = body(uid=uid, generation=2, observed=1, finalizer=True, schedule="0 4 * * *")

    synced = scheduledjobs.sync(context, changed, revalidate=False)

    assert synced.writes is not None and synced.writes.status and synced.writes.generation == 2
    assert [note.name for note in synced.writes.events] == ["nightly.gen2.scheduled"]
    stored = definitions.get(conn, uuid.UUID(uid))
    assert stored is not None and stored.schedule == "0 4 * * *"


def test_marking_a_generation_published_is_not_a_change_of_the_definition(context, conn):
    """The dispatcher keeps definitions between ticks by version (migration 0014)."""
    new = body()
    scheduledjobs.sync(context, new, revalidate=True)
    uid = uuid.UUID(new["metadata"]["uid"])
    before = definitions.get(conn, uid)
    definitions.mark_published(conn, uid, 1)
    after = definitions.get(conn, uid)

    assert before is not None and after is not None
    assert after.published_generation == 1 and after.version == before.version


def test_an_unchanged_published_scheduledjob_writes_nothing_anywhere(context, conn):
    new = body()
    scheduledjobs.sync(context, new, revalidate=True)
    uid = new["metadata"]["uid"]
    settled = body(uid=uid, observed=1, finalizer=True)
    version = row_version(conn, uid)

    for revalidate in (False, True):
        assert scheduledjobs.sync(context, settled, revalidate=revalidate) == scheduledjobs.Synced()
    assert row_version(conn, uid) == version


def test_a_listed_scheduledjob_is_validated_again_though_its_spec_is_in_force(context, conn):
    """A definition an older release stored, that this release refuses, is rejected on
    the first start (the list), not kept because its spec did not change."""
    new = body()
    scheduledjobs.sync(context, new, revalidate=True)
    uid = new["metadata"]["uid"]
    # An older release accepted what this one refuses: planted in the stored spec and in
    # the object alike (the object is what was applied then).
    refused = {"schedule": "0 3 * * *", "timeZone": "Mars/Olympus_Mons"}
    conn.execute(
        "UPDATE pgsched.job_definitions SET spec = spec || %s::jsonb WHERE id = %s",
        (Jsonb(refused), uid),
    )
    listed = body(uid=uid, observed=1, finalizer=True, timeZone="Mars/Olympus_Mons")

    watched = scheduledjobs.sync(context, listed, revalidate=False)
    relisted = scheduledjobs.sync(context, listed, revalidate=True)

    assert watched.writes is None  # the watch's fast path trusts what is in force
    assert relisted.writes is not None
    assert relisted.writes.rejected_status is not None
    assert "timeZone" in relisted.writes.rejected_status["conditions"][0]["message"]


def started(conn: connection.Connection, uid: uuid.UUID, *, token: str) -> runs.Run:
    """A run of ``uid`` asked for now and RUNNING, as if its pod had started."""
    run = runs.run_now(conn, uid, token=token).run
    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'RUNNING', started_at = now(),"
        " lease_token = gen_random_uuid() WHERE id = %s",
        (run.id,),
    )
    return run


def test_a_deleted_scheduledjob_waits_for_its_running_runs_then_releases_the_finalizer(
    context, conn
):
    new = body(finalizer=True)
    scheduledjobs.sync(context, new, revalidate=True)
    uid = uuid.UUID(new["metadata"]["uid"])
    queued = started(conn, uid, token="t")
    deleting = body(uid=str(uid), finalizer=True, deleting=True)

    waiting = scheduledjobs.sync(context, deleting, revalidate=False)
    assert waiting.retry_in == scheduledjobs.DELETION_RECHECK_SECONDS
    assert waiting.writes is not None and not waiting.writes.release_finalizer
    stored = definitions.get(conn, uid)
    assert stored is not None and stored.deleted_at is not None
    [run] = conn.execute(
        "SELECT cancel_requested FROM pgsched.job_runs WHERE id = %s", (queued.id,)
    ).fetchall()
    assert run["cancel_requested"]

    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'CANCELLED', finished_at = now() WHERE id = %s",
        (queued.id,),
    )
    done = scheduledjobs.sync(context, deleting, revalidate=False)
    assert done.retry_in is None
    assert done.writes is not None and done.writes.release_finalizer


class NamespaceGoing(NoNamespaceToRead):
    """The API server as the Namespace watch has described it: namespace ``jobs`` is being
    deleted since 2026-12-02 (the ScheduledJobs of ``body`` were created before)."""

    def __init__(self) -> None:
        self.endings = NamespaceEndings()
        self.endings.watched("jobs", datetime(2026, 12, 2, tzinfo=UTC))


def test_a_scheduledjob_whose_namespace_is_going_is_handled_as_deleted_before_kubernetes_deletes_it(
    context, conn
):
    """Kubernetes deletes a terminating namespace's ScheduledJobs only after its pods: its
    runs are asked to stop and its finalizer released on the namespace's deletion alone."""
    live = body(finalizer=True)
    scheduledjobs.sync(context, live, revalidate=True)
    uid = uuid.UUID(live["metadata"]["uid"])
    running = started(conn, uid, token="a")
    queued = runs.run_now(conn, uid, token="b").run
    going = replace(context, kube=NamespaceGoing())

    waiting = scheduledjobs.sync(going, live, revalidate=False)  # no deletionTimestamp
    assert waiting.retry_in == scheduledjobs.DELETION_RECHECK_SECONDS
    assert waiting.writes is not None and not waiting.writes.release_finalizer
    stored = definitions.get(conn, uid)
    assert stored is not None and stored.deleted_at is not None  # nothing new is scheduled
    rows = {
        row["id"]: row
        for row in conn.execute(
            "SELECT id, status, cancel_requested, cancelled_by FROM pgsched.job_runs"
            " WHERE definition_id = %s",
            (uid,),
        ).fetchall()
    }
    assert rows[running.id]["cancel_requested"]
    assert rows[queued.id]["status"] == "CANCELLED"
    assert rows[queued.id]["cancelled_by"] == runs.BY_NAMESPACE_DELETION

    conn.execute(
        "UPDATE pgsched.job_runs SET status = 'CANCELLED', finished_at = now() WHERE id = %s",
        (running.id,),
    )
    done = scheduledjobs.sync(going, live, revalidate=False)
    assert done.writes is not None and done.writes.release_finalizer
    # The echo of the release (no finalizer, still no deletionTimestamp) puts nothing back.
    echo = scheduledjobs.sync(going, body(uid=str(uid)), revalidate=True)
    assert echo.writes is not None and not echo.writes.add_finalizer
    assert echo.writes.release_finalizer
    # A namespace of the same name created since is another namespace: its jobs are served.
    later = body(finalizer=True)
    later["metadata"]["creationTimestamp"] = "2026-12-03T00:00:00Z"
    fresh = scheduledjobs.sync(going, later, revalidate=True)
    assert fresh.writes is not None and not fresh.writes.release_finalizer


def test_a_watch_event_of_a_settled_scheduledjob_does_not_reach_the_database(dsn):
    """Every status patch the publisher makes comes back as a MODIFIED event: with runs
    every minute across a fleet, a database read each would be the sync's steady load."""
    with connection.pool(dsn, name="pgsched-test-sync", max_size=1) as pool:
        context = scheduledjobs.Context(
            pool=pool,
            kube=NoRequests(),  # type: ignore[arg-type]
            publisher=Publisher(None),  # type: ignore[arg-type]
            clock=lambda: None,
        )
        pool.close()  # any use of the database now fails
        settled = body(observed=1, finalizer=True)

        assert scheduledjobs.sync(context, settled, revalidate=False) == scheduledjobs.Synced()
        # A listed one is read and validated again: here, the closed pool says so.
        assert scheduledjobs.sync(context, settled, revalidate=True).retry_in is not None
