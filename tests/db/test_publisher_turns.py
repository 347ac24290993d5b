"""The run-events outbox during a stampede: the statuses and Events of a run outside the
burst are published in its turn, not after the burst's; each ScheduledJob's pending changes
cost one status refresh; a batch publishes for about a second, so a change that arrives
meanwhile is not queued behind the whole batch (k8s/reporting/publisher.py, "Fair turns")."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from factories import RecordingLauncher, database_at, define
from pgsched.db import connection, migrate, queries
from pgsched.engine import dispatch, lease, materialize, runs, settle
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.reporting import publisher
from pgsched.k8s.reporting.publisher import Publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SET_UP = T0 - timedelta(minutes=30)


class Api:
    """An API server in memory for the publisher: ScheduledJobs by name (their uid is
    their definition's id), Events and status patches recorded in the order they came.
    Each request takes ``latency`` seconds, as requests do when the token bucket gives the
    publisher only its background share."""

    def __init__(self, conn, *, latency=0.0):
        rows = conn.execute("SELECT id, name FROM pgsched.job_definitions").fetchall()
        self.uids = {row["name"]: str(row["id"]) for row in rows}
        self.latency = latency
        self.events: list[tuple[str, str]] = []  # (ScheduledJob, reason)
        self.patched: list[str] = []  # ScheduledJobs, per status patch
        self.seen: dict[str, float] = {}  # ScheduledJob -> when its RunLaunched was posted
        self.endings = NamespaceEndings()  # none seen going
        self.closed = False

    def _request(self):
        if self.closed:
            raise RuntimeError("the API server is gone")
        time.sleep(self.latency)

    def get(self, path, **params):
        self._request()
        if "/jobs" in path:
            return {"items": []}
        name = path.rsplit("/", 1)[-1]
        return {"metadata": {"name": name, "uid": self.uids[name]}, "status": {}}

    def create(self, path, body):
        self._request()
        name = body["involvedObject"]["name"]
        self.events.append((name, body["reason"]))
        if body["reason"] == "RunLaunched":
            self.seen.setdefault(name, time.monotonic())
        return body

    def merge_patch(self, path, body):
        self._request()
        self.patched.append(path.rsplit("/", 2)[-2])
        return body


def launch_stampede(conn, count):
    """``count`` ScheduledJobs on 0 * * * *, materialized and launched at T0: a QUEUED
    and a RUNNING change each on the outbox."""
    for index in range(count):
        define(conn, f"hourly-{index}", schedule="0 * * * *", now=SET_UP)
    materialize.run_once(conn, now=T0)
    while dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed:
        pass


OTHER_DUE = T0 + timedelta(seconds=5)


def define_other(conn):
    """An unrelated one-shot, due a few seconds after the stampede."""
    define(conn, "other", runAt=OTHER_DUE.isoformat(), now=SET_UP)


def launch_other(conn):
    materialize.run_once(conn, now=OTHER_DUE)
    assert dispatch.run_once(conn, RecordingLauncher(), now=OTHER_DUE).claimed


def pending(conn):
    return conn.execute("SELECT count(*) AS n FROM pgsched.run_events").fetchone()["n"]


def test_a_run_outside_a_burst_is_published_in_its_turn_not_after_the_burst(conn):
    launch_stampede(conn, 300)
    define_other(conn)
    launch_other(conn)
    api = Api(conn)

    Publisher(api).run_once(conn)

    # Its due instant's first turn ties with the stampede's first (the older goes first);
    # oldest first, it came after all 600 of the stampede's changes.
    assert api.patched.index("other") == 1
    assert api.events.index(("other", "RunLaunched")) == 1


def test_a_scheduled_jobs_pending_changes_cost_one_status_refresh_and_keep_every_event(conn):
    launch_stampede(conn, 300)
    api = Api(conn)
    publish = Publisher(api)

    while publish.run_once(conn).statuses:
        pass

    assert pending(conn) == 0
    assert Counter(api.patched) == {f"hourly-{index}": 1 for index in range(300)}  # not 2
    assert Counter(api.events) == {(f"hourly-{index}", "RunLaunched"): 1 for index in range(300)}


def test_a_change_during_a_burst_waits_about_a_batch_second_not_for_a_whole_batch(conn, dsn):
    """At the background share of the API budget (5 requests/s while Jobs are created) a
    batch of 200 changes took a minute; a run launched meanwhile waited for all of it."""
    launch_stampede(conn, 100)
    define_other(conn)
    api = Api(conn, latency=0.2)
    stop = threading.Event()

    def publish_loop():
        with connection.connect(dsn) as own:
            while not stop.is_set():
                try:
                    Publisher(api).run_once(own)
                except RuntimeError:  # the test is over
                    return

    loop = threading.Thread(target=publish_loop)
    loop.start()
    try:
        time.sleep(0.5)  # a batch is being published
        launch_other(conn)
        launched = time.monotonic()
        deadline = launched + 10
        while "other" not in api.seen and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        api.closed = True
        loop.join(timeout=30)
    # At most what is left of a batch (BATCH_SECONDS and one ScheduledJob's three
    # requests), then its own Event.
    assert "other" in api.seen, "no RunLaunched Event within 10 s"
    assert api.seen["other"] - launched < publisher.BATCH_SECONDS + 4 * api.latency + 1.0


def test_a_second_replica_publishes_the_next_turns_while_the_first_holds_its_batch(conn, dsn):
    launch_stampede(conn, 20)
    with connection.connect(dsn) as first, first.transaction():
        held = first.execute(queries.get("claim_run_events"), {"limit": 10}).fetchall()
        api = Api(conn)
        Publisher(api).run_once(conn)
    held_jobs = {row["name"] for row in held}
    assert len(held_jobs) == 5  # a QUEUED and a RUNNING change each
    assert set(api.patched) == {f"hourly-{index}" for index in range(20)} - held_jobs
    assert pending(conn) == 10


def test_an_upstream_whose_runs_triggered_others_is_refreshed_once_with_them(conn):
    """Its status lists the runs its last run triggered, so the downstream runs' changes
    refresh it too: once in a batch, however many of them there are."""
    extract = define(conn, "extract", schedule="0 0 1 1 *", now=T0)
    for name in ("load", "report"):
        define(conn, name, after=[{"scheduledJob": "extract"}], now=T0)
    runs.run_now(conn, extract.id, token="by-hand", scheduled_for=T0)
    [run] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    lease.finish(conn, lease.Lease(run.id, run.lease_token), "COMPLETED", now=T0)
    assert len(settle.run_once(conn, now=T0 + timedelta(seconds=1)).chained) == 2
    api = Api(conn)

    Publisher(api).run_once(conn)

    assert Counter(api.patched) == {"extract": 1, "load": 1, "report": 1}
    assert pending(conn) == 0


def test_changes_pending_at_the_upgrade_keep_their_instant_and_old_notes_are_published(
    postgres,
):
    """Migration 0016 gives the changes already on the outbox their run's due instant; a
    replica of the previous release still inserts settle's notes without one (a rolling
    upgrade), and those are published like the rest."""
    dsn = database_at(postgres, "outbox_upgrade", 15)
    with connection.connect(dsn) as conn:
        launch_stampede(conn, 3)
        migrate.migrate(conn)
        instants = conn.execute("SELECT scheduled_for FROM pgsched.run_events").fetchall()
        assert [row["scheduled_for"] for row in instants] == [T0] * 6
        conn.execute(  # announce_suspensions, as the previous release wrote it
            "INSERT INTO pgsched.run_events (run_id, definition_id, status, reason, attempt,"
            " trigger) SELECT id, definition_id, 'AUTO_SUSPENDED', 'TooManyFailures', attempt,"
            " trigger FROM pgsched.job_runs LIMIT 1"
        )
        api = Api(conn)
        while Publisher(api).run_once(conn).statuses:
            pass
        assert pending(conn) == 0
        assert Counter(api.patched) == {"hourly-0": 1, "hourly-1": 1, "hourly-2": 1}
