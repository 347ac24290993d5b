"""Notifications: derived in the database with the change that causes them, delivered by
the notifier to a real HTTP receiver (devenv/receiver.py), at least once, each with its
idempotency key, in order per ScheduledJob and target, within bounds no receiver can
stretch.

Secrets come from a stand-in for the Kubernetes API (a dict keyed by namespace): what the
notifier asks it for, by namespace, is the tenancy rule under test. Everything else is
real: Postgres, the trigger, the sockets.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cli_runner import pgsched
from db.test_publisher_turns import Api
from devenv.receiver import Receiver
from factories import RecordingLauncher, define
from pgsched import metrics
from pgsched.db import connection
from pgsched.engine import deadlines, dispatch, lease, materialize, notifications, runs, settle
from pgsched.k8s.notifications import destinations, notifier
from pgsched.k8s.reporting.publisher import Publisher

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
KEY = b"team-a-signing-key"
_tokens = itertools.count()


class Secrets:
    """Secrets by (namespace, name, key); records what was asked for."""

    def __init__(self, values: dict[tuple[str, str, str], bytes]) -> None:
        self.values = values
        self.asked: list[tuple[str, str, str]] = []

    def read(self, namespace: str, name: str, key: str) -> bytes:
        self.asked.append((namespace, name, key))
        try:
            return self.values[(namespace, name, key)]
        except KeyError:
            raise notifier.SecretError(f"Secret {namespace}/{name} has no key {key!r}") from None


SECRETS = {("default", "hooks", "hmac"): KEY}
# The receivers listen on this machine's loopback, which the notifier refuses unless it is
# allowed: what an administrator does for in-cluster receivers (PGSCHED_NOTIFY_ALLOW).
LOOPBACK = destinations.Allowed.parse(["127.0.0.1/32"])


def receiving(secrets, **settings) -> notifier.Notifier:
    """A notifier for these tests' receivers: on loopback, allowed, and, since all of them
    share 127.0.0.1 and most jobs one namespace, with per-address and per-namespace bounds
    that do not make them take turns (tests/db/test_notification_bulkheads.py tests those
    bounds)."""
    defaults = {
        "allowed": LOOPBACK,
        "per_namespace_concurrency": 8,
        "per_address_concurrency": 8,
        "per_address_rate": 100.0,
    }
    return notifier.Notifier(secrets, **{**defaults, **settings})


@pytest.fixture
def receiver():
    found = Receiver().start()
    yield found
    found.stop()


@pytest.fixture
def notify():
    found = receiving(Secrets(dict(SECRETS)), timeout=2.0, deadline=3.0)
    yield found
    found.close()


def webhook(receiver: Receiver, name: str = "team", **fields):
    return {
        "name": name,
        "type": "Webhook",
        "url": receiver.url,
        "signingSecretRef": {"name": "hooks", "key": "hmac"},
        **fields,
    }


def claimed_run(conn, job, at):
    runs.run_now(conn, job.id, token=f"t{next(_tokens)}", scheduled_for=at)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id], now=at).claimed
    return run


def end_run(conn, run, status, at, *, reason=None, error=None):
    assert lease.finish(
        conn, lease.Lease(run.id, run.lease_token), status, reason=reason, error=error, now=at
    )
    settle.run_once(conn, now=at)


def fail(conn, job, at):
    run = claimed_run(conn, job, at)
    end_run(conn, run, "FAILED", at, reason="NonZeroExit", error="exit code 3")
    return run


def drain(conn, notify, *, now=None, seconds=15.0):
    """Run the notifier until nothing is in flight and nothing more is due."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        result = notify.run_once(conn, now=now)
        if not notify.busy() and not result.claimed:
            return
        time.sleep(0.01)
    raise AssertionError("the notifier did not settle")


def events_received(receiver):
    return [request.json["event"] for request in receiver.received()]


def outbox(conn):
    return conn.execute(
        "SELECT event, state, attempts, target_name, last_error FROM pgsched.notifications"
        " ORDER BY id"
    ).fetchall()


# -- What is sent ---------------------------------------------------------------------------


def test_a_final_failure_reaches_each_target_type_once_signed_and_keyed(conn, notify):
    hook, slack, cloud = Receiver().start(), Receiver().start(), Receiver().start()
    try:
        job = define(
            conn,
            now=T0,
            notify={
                "targets": [
                    webhook(hook),
                    {"name": "chat", "type": "Slack", "url": slack.url},
                    {
                        "name": "bus",
                        "type": "CloudEvents",
                        "url": cloud.url,
                        "signingSecretRef": {"name": "hooks", "key": "hmac"},
                    },
                ]
            },
        )
        run = fail(conn, job, T0)
        drain(conn, notify)
        [signed], [chat], [event] = hook.received(), slack.received(), cloud.received()
    finally:
        for server in (hook, slack, cloud):
            server.stop()

    assert signed.signed_by(KEY) and not signed.signed_by(b"another key")
    body = signed.json
    assert body["event"] == "failed"
    assert body["run"] | {"scheduledFor": None} == body["run"] | {
        "id": run.id,
        "attempt": 1,
        "status": "FAILED",
        "reason": "NonZeroExit",
        "error": "exit code 3",
        "scheduledFor": None,
    }
    assert body["scheduledJob"] == {"namespace": "default", "name": "job", "uid": str(job.id)}
    assert signed.headers["Idempotency-Key"] == body["idempotencyKey"]
    assert "NonZeroExit: exit code 3" in chat.json["text"] and "default/job" in chat.json["text"]
    assert set(chat.json) == {"text"}
    envelope = event.json
    assert event.headers["Content-Type"].startswith("application/cloudevents+json")
    assert envelope["specversion"] == "1.0" and envelope["type"] == "dev.pgsched.run.failed"
    assert envelope["id"] == event.headers["Idempotency-Key"]
    assert envelope["source"] == "/apis/pgsched.dev/v1alpha1/namespaces/default/scheduledjobs/job"
    assert envelope["data"]["run"]["id"] == run.id and event.signed_by(KEY)
    keys = {signed.headers["Idempotency-Key"], chat.headers["Idempotency-Key"], envelope["id"]}
    assert len(keys) == 3  # one per target


def fail_both_attempts(conn, receiver, **notify):
    """A job with one retry, whose attempts both fail."""
    job = define(
        conn,
        now=T0,
        retryPolicy={
            "maxAttempts": 2,
            "retryOn": ["NonZeroExit"],
            "backoff": {"initialSeconds": 0, "jitter": 0},
        },
        notify={**notify, "targets": [webhook(receiver)]},
    )
    fail(conn, job, T0)
    [retry] = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[job.id], now=T0 + timedelta(seconds=1)
    ).claimed
    end_run(conn, retry, "FAILED", T0 + timedelta(seconds=2), reason="NonZeroExit")


def test_failed_is_sent_for_the_final_attempt_only_by_default_and_retried_for_each(
    conn, receiver, notify
):
    fail_both_attempts(conn, receiver)
    drain(conn, notify)
    assert events_received(receiver) == ["retried", "failed"]
    assert [r.json["run"]["attempt"] for r in receiver.received()] == [2, 2]


def test_failed_on_each_attempt_sends_every_failure_in_order(conn, receiver, notify):
    fail_both_attempts(conn, receiver, failedOn="EachAttempt")
    drain(conn, notify)
    assert events_received(receiver) == ["failed", "retried", "failed"]


def test_a_success_after_a_failure_is_recovered_and_an_ordinary_one_is_silent(
    conn, receiver, notify
):
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    end_run(conn, claimed_run(conn, job, T0), "COMPLETED", T0)
    fail(conn, job, T0 + timedelta(minutes=1))
    end_run(conn, claimed_run(conn, job, T0 + timedelta(minutes=2)), "COMPLETED", T0)
    end_run(conn, claimed_run(conn, job, T0 + timedelta(minutes=3)), "COMPLETED", T0)
    drain(conn, notify)
    assert events_received(receiver) == ["failed", "recovered"]


def test_auto_suspension_is_sent_after_the_failure_that_caused_it(conn, receiver, notify):
    job = define(conn, now=T0, failureSuspendThreshold=1, notify={"targets": [webhook(receiver)]})
    fail(conn, job, T0)
    drain(conn, notify)
    assert events_received(receiver) == ["failed", "autoSuspended"]


def test_skipped_occurrences_are_sent_with_their_reason(conn, receiver, notify):
    job = define(
        conn,
        now=T0,
        schedule="* * * * *",
        catchUp="none",
        notify={"targets": [webhook(receiver, events=["skipped"])]},
    )
    materialize.run_once(conn, now=T0 + timedelta(minutes=5, seconds=30))
    drain(conn, notify)
    received = receiver.received()
    assert received and {r.json["event"] for r in received} == {"skipped"}
    assert {r.json["run"]["reason"] for r in received} == {"MissedDowntime"}
    assert all(r.json["scheduledJob"]["uid"] == str(job.id) for r in received)


def test_a_target_gets_only_the_events_it_names(conn, receiver, notify):
    other = Receiver().start()
    try:
        job = define(
            conn,
            now=T0,
            notify={
                "targets": [webhook(receiver, events=["recovered"]), webhook(other, name="all")]
            },
        )
        fail(conn, job, T0)
        drain(conn, notify)
        assert events_received(receiver) == [] and events_received(other) == ["failed"]
    finally:
        other.stop()


def test_no_notification_without_a_committed_change(conn, receiver):
    """The outbox is written in the change's transaction: a rolled-back failure sends
    nothing."""
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    run = claimed_run(conn, job, T0)
    with pytest.raises(RuntimeError), conn.transaction():
        lease.finish(conn, lease.Lease(run.id, run.lease_token), "FAILED", reason="NonZeroExit")
        settle.run_once(conn, now=T0)
        assert [row["event"] for row in outbox(conn)] == ["failed"]
        raise RuntimeError("the transaction rolls back")
    assert outbox(conn) == []


# -- Finish-by deadlines ----------------------------------------------------------------------


def test_a_missed_deadline_is_announced_once_while_the_run_keeps_running(conn, receiver, notify):
    job = define(conn, now=T0, deadline="1m", notify={"targets": [webhook(receiver)]})
    run = claimed_run(conn, job, T0)
    assert deadlines.run_once(conn, now=T0 + timedelta(seconds=59)).missed == []
    assert deadlines.run_once(conn, now=T0 + timedelta(seconds=61)).missed == [run.id]
    assert deadlines.run_once(conn, now=T0 + timedelta(seconds=90)).missed == []
    assert runs.get(conn, run.id).status == "RUNNING"
    drain(conn, notify)
    [missed] = receiver.received()
    assert missed.json["event"] == "deadlineMissed"
    assert missed.json["run"]["deadlineAt"].startswith("2026-06-01T12:01:00")
    notes = conn.execute(
        "SELECT status FROM pgsched.run_events WHERE run_id = %s AND status = 'DEADLINE_MISSED'",
        [run.id],
    ).fetchall()
    assert len(notes) == 1  # the publisher's Warning Event and metric
    end_run(conn, run, "COMPLETED", T0 + timedelta(minutes=5))
    assert runs.get(conn, run.id).status == "COMPLETED"


def test_a_missed_deadline_is_a_warning_event_and_a_metric(conn):
    job = define(conn, "late", now=T0, deadline="1m")
    run = claimed_run(conn, job, T0)
    before = metrics.DEADLINES_MISSED.labels("default")._value.get()
    api = Api(conn)
    Publisher(api).run_once(conn)
    deadlines.run_once(conn, now=T0 + timedelta(minutes=2))
    Publisher(api).run_once(conn)
    assert api.events[-1] == ("late", "RunDeadlineMissed")
    assert metrics.DEADLINES_MISSED.labels("default")._value.get() == before + 1
    assert runs.get(conn, run.id).status == "RUNNING"


class StatusApi(Api):
    """The publisher's API that keeps the last status written for each ScheduledJob."""

    def __init__(self, conn):
        super().__init__(conn)
        self.statuses: dict[str, dict] = {}

    def merge_patch(self, path, body):
        self.statuses[path.rsplit("/", 2)[-2]] = body.get("status") or {}
        return super().merge_patch(path, body)


def test_the_finish_by_instant_and_its_miss_are_on_the_status_and_describe(conn, dsn):
    """Not only an Event: `kubectl get sj -o yaml` (lastRun) and `pgsched describe` say when
    the run must finish by, and once it has not, that it was missed and left running."""
    job = define(conn, "export", now=T0, deadline="1m", timeZone="Europe/Sofia")
    run = claimed_run(conn, job, T0)
    api = StatusApi(conn)
    while Publisher(api).run_once(conn).statuses:
        pass
    last = api.statuses["export"]["lastRun"]
    assert last["finishBy"] == "2026-06-01T12:01:00Z" and "deadlineMissedAt" not in last
    before = pgsched("describe", str(run.id), dsn=dsn)
    assert "Finish by" in before.out and "missed" not in before.out, before.out + before.err

    deadlines.run_once(conn, now=T0 + timedelta(minutes=2))
    while Publisher(api).run_once(conn).statuses:
        pass
    last = api.statuses["export"]["lastRun"]
    assert last["deadlineMissedAt"] == "2026-06-01T12:02:00Z"
    assert last["status"] == "RUNNING"
    described = pgsched("describe", str(run.id), dsn=dsn).out
    assert "2026-06-01 15:01:00 EEST: missed (still running; not stopped)" in described
    end_run(conn, run, "COMPLETED", T0 + timedelta(minutes=5))
    described = pgsched("describe", str(run.id), dsn=dsn).out
    assert "missed (finished at 2026-06-01 15:05:00 EEST; not stopped)" in described


@pytest.mark.parametrize(
    ("deadline", "zone", "scheduled", "finish_by"),
    [
        ("2h", "UTC", "2026-06-01T12:00:00Z", "2026-06-01T14:00:00Z"),
        ("1h30m", "UTC", "2026-06-01T12:00:00Z", "2026-06-01T13:30:00Z"),
        ("90m", "UTC", "2026-06-01T12:00:00Z", "2026-06-01T13:30:00Z"),
        ("45s", "UTC", "2026-06-01T12:00:00Z", "2026-06-01T12:00:45Z"),
        # 23:00 in Sofia (UTC+3 in June): finish by 06:00 the next morning there.
        ("06:00", "Europe/Sofia", "2026-06-01T20:00:00Z", "2026-06-02T03:00:00Z"),
        # 02:00 there: 06:00 the same morning.
        ("06:00", "Europe/Sofia", "2026-06-01T23:00:00Z", "2026-06-02T03:00:00Z"),
        # Due at exactly 06:00: the next 06:00, not this instant.
        ("06:00", "Europe/Sofia", "2026-06-02T03:00:00Z", "2026-06-03T03:00:00Z"),
    ],
)
def test_finish_by_instants(conn, deadline, zone, scheduled, finish_by):
    [row] = conn.execute(
        "SELECT pgsched.finish_by(%s, %s::timestamptz, %s) AS at", [deadline, scheduled, zone]
    ).fetchall()
    assert row["at"] == datetime.fromisoformat(finish_by)


# -- Delivery semantics -------------------------------------------------------------------------


def test_competing_replicas_deliver_each_notification_once_in_order_through_an_outage(
    conn, dsn, receiver
):
    jobs = [
        define(conn, f"job-{index}", now=T0, notify={"targets": [webhook(receiver)]})
        for index in range(4)
    ]
    receiver.stop()  # the outage begins before anything is sent
    for minute in range(5):
        for job in jobs:
            fail(conn, job, T0 + timedelta(minutes=minute))
    expected = {
        row["idempotency_key"]
        for row in conn.execute("SELECT idempotency_key FROM pgsched.notifications")
    }
    assert len(expected) == 20

    replicas = [receiving(Secrets(dict(SECRETS)), timeout=1.0, deadline=2.0) for _ in range(2)]
    sessions = [connection.connect(dsn) for _ in replicas]
    try:
        for replica, session in zip(replicas, sessions, strict=True):
            drain(session, replica, now=T0 + timedelta(minutes=10))
        down = outbox(conn)
        assert {row["state"] for row in down} == {"PENDING"}
        # Heads only (one per job), at most two at once to the one host: the rest deferred.
        assert 1 <= sum(row["attempts"] for row in down) <= 4
        assert all("ConnectionRefusedError" in row["last_error"] for row in down if row["attempts"])

        receiver.start()  # back on the same port
        stop = threading.Event()

        def replica_loop(replica, session):  # on the database's clock: past every backoff
            while not stop.is_set():
                replica.run_once(session)
                time.sleep(0.005)

        threads = [
            threading.Thread(target=replica_loop, args=pair)
            for pair in zip(replicas, sessions, strict=True)
        ]
        for thread in threads:
            thread.start()
        ends = time.monotonic() + 30
        while len(receiver.received()) < 20 and time.monotonic() < ends:
            time.sleep(0.05)
        time.sleep(0.3)  # anything doubled would arrive now
        stop.set()
        for thread in threads:
            thread.join()
        for replica, session in zip(replicas, sessions, strict=True):
            drain(session, replica)
    finally:
        for replica in replicas:
            replica.close()
        for session in sessions:
            session.close()

    received = receiver.received()
    keys = [request.headers["Idempotency-Key"] for request in received]
    assert sorted(keys) == sorted(expected)  # each exactly once
    assert {row["state"] for row in outbox(conn)} == {"DELIVERED"}
    for job in jobs:  # per ScheduledJob and target: in the order the runs failed
        ids = [r.json["run"]["id"] for r in received if r.json["scheduledJob"]["name"] == job.name]
        assert ids == sorted(ids) and len(ids) == 5


def test_a_hanging_receiver_does_not_delay_another_target(conn, receiver):
    hanging = Receiver(hang=30).start()
    notify = receiving(Secrets(dict(SECRETS)), timeout=2.0, deadline=3.0)
    try:
        slow = define(conn, "slow", now=T0, notify={"targets": [webhook(hanging)]})
        fast = define(conn, "fast", now=T0, notify={"targets": [webhook(receiver)]})
        fail(conn, slow, T0)
        fail(conn, fast, T0)
        started = time.monotonic()
        first = notify.run_once(conn)
        returned = time.monotonic() - started
        assert first.claimed == 2
        while not receiver.received():
            time.sleep(0.005)
        fast_seconds = time.monotonic() - started
        drain(conn, notify)
        hung_seconds = time.monotonic() - started
    finally:
        notify.close()
        hanging.stop()
    print(f"run_once {returned:.3f}s, other target {fast_seconds:.3f}s, hung {hung_seconds:.1f}s")
    assert returned < 0.5  # the loop never waits for a receiver
    assert fast_seconds < 1.0
    assert 2.0 <= hung_seconds < 4.0  # cut at the read timeout, well before the hang ends
    states = {row["target_name"]: row for row in outbox(conn)}
    assert len(hanging.received()) == 1
    assert [row["state"] for row in outbox(conn)] == ["PENDING", "DELIVERED"]
    assert "timed out" in str(states["team"]["last_error"]) or outbox(conn)[0]["last_error"]


def test_a_redirect_to_another_host_is_not_followed(conn, receiver, notify):
    elsewhere = Receiver().start()
    try:
        receiver.redirect = elsewhere.url
        job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
        fail(conn, job, T0)
        drain(conn, notify)
        assert elsewhere.received() == [] and len(receiver.received()) == 1
    finally:
        elsewhere.stop()
    [row] = outbox(conn)
    assert row["state"] == "PENDING" and "redirect" in row["last_error"]
    assert "not followed" in row["last_error"]


def test_a_huge_answer_is_read_only_in_part(conn, receiver, notify):
    receiver.huge = 256 * 1024 * 1024
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    fail(conn, job, T0)
    started = time.monotonic()
    drain(conn, notify)
    assert time.monotonic() - started < 2.0
    assert [row["state"] for row in outbox(conn)] == ["DELIVERED"]


def test_server_errors_are_retried_with_backoff_then_dead_lettered(conn, receiver):
    receiver.status = 500
    notify = receiving(Secrets(dict(SECRETS)), max_attempts=3, backoff_seconds=10)
    try:
        job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
        fail(conn, job, T0)
        drain(conn, notify, now=T0)
        drain(conn, notify, now=T0 + timedelta(seconds=5))  # still backing off
        assert len(receiver.received()) == 1
        drain(conn, notify, now=T0 + timedelta(seconds=13))
        drain(conn, notify, now=T0 + timedelta(seconds=40))
        assert len(receiver.received()) == 3
        drain(conn, notify, now=T0 + timedelta(hours=1))
    finally:
        notify.close()
    assert len(receiver.received()) == 3
    [row] = outbox(conn)
    assert row["state"] == "DEAD" and row["attempts"] == 3 and "500" in row["last_error"]
    [dead] = notifications.dead_letters(conn)
    assert dead["namespace"] == "default" and dead["event"] == "failed"
    assert notifications.dead_counts(conn) == {"default": 1}
    keys = {r.headers["Idempotency-Key"] for r in receiver.received()}
    assert len(keys) == 1  # the same key on every redelivery


def test_a_refusal_is_a_dead_letter_at_once(conn, receiver, notify):
    receiver.status = 403
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    fail(conn, job, T0)
    drain(conn, notify)
    assert [(row["state"], row["attempts"]) for row in outbox(conn)] == [("DEAD", 1)]


def test_secrets_are_read_from_the_jobs_own_namespace_only(conn, receiver):
    secrets = Secrets(dict(SECRETS))  # "hooks" exists in default only
    notify = receiving(secrets)
    try:
        job = define(conn, namespace="team-b", now=T0, notify={"targets": [webhook(receiver)]})
        fail(conn, job, T0)
        drain(conn, notify)
    finally:
        notify.close()
    assert secrets.asked == [("team-b", "hooks", "hmac")]
    assert receiver.received() == []
    [row] = outbox(conn)
    assert row["state"] == "PENDING" and "Secret team-b/hooks" in row["last_error"]


def test_a_job_pods_own_failure_notifies_and_its_login_cannot_reach_the_outbox(
    conn, job_dsn, receiver, notify
):
    """The job role fails its run through its lease function: the notification is derived
    in that transaction all the same; the role itself can neither read nor forge one."""
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    run = claimed_run(conn, job, T0)
    with connection.connect(job_dsn) as pod:
        assert lease.finish(
            pod, lease.Lease(run.id, run.lease_token), "FAILED", reason="NonZeroExit"
        )
        for statement in (
            "SELECT * FROM pgsched.notifications",
            "UPDATE pgsched.notifications SET state = 'DELIVERED'",
            "INSERT INTO pgsched.run_events (run_id, definition_id, status, attempt, trigger)"
            " VALUES (1, gen_random_uuid(), 'FAILED', 1, 'manual')",
            "SELECT pgsched.finish_by('1h', now(), 'UTC')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                pod.execute(statement)
    settle.run_once(conn, now=T0)
    drain(conn, notify)
    assert events_received(receiver) == ["failed"]


def test_a_url_kept_in_a_secret_is_read_from_it_and_a_bad_one_is_not_followed(conn, receiver):
    secrets = Secrets(
        {
            ("default", "chat", "url"): receiver.url.encode(),
            ("default", "chat", "bad"): b"file:///x",
        }
    )
    notify = receiving(secrets)
    try:
        job = define(
            conn,
            now=T0,
            notify={
                "targets": [
                    {
                        "name": "good",
                        "type": "Slack",
                        "urlSecretRef": {"name": "chat", "key": "url"},
                    },
                    {
                        "name": "bad",
                        "type": "Slack",
                        "urlSecretRef": {"name": "chat", "key": "bad"},
                    },
                ]
            },
        )
        fail(conn, job, T0)
        drain(conn, notify)
    finally:
        notify.close()
    assert len(receiver.received()) == 1 and "text" in receiver.received()[0].json
    states = {row["target_name"]: row for row in outbox(conn)}
    assert states["good"]["state"] == "DELIVERED"
    assert (
        states["bad"]["state"] == "PENDING" and "not an http(s) URL" in states["bad"]["last_error"]
    )


def test_a_replica_lost_after_the_receiver_took_a_notification_means_a_redelivery_with_its_key(
    conn, receiver
):
    """At least once, honestly: the answer was never recorded (the replica died), so once
    its lease runs out another replica sends it again, with the same idempotency key. A
    graceful stop records what is under way and sends nothing twice."""
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    fail(conn, job, T0)
    fail(conn, job, T0 + timedelta(minutes=1))
    lost = receiving(Secrets(dict(SECRETS)))
    assert lost.run_once(conn).claimed == 1  # the head of the line
    wait_until = time.monotonic() + 5
    while not receiver.received() and time.monotonic() < wait_until:
        time.sleep(0.01)
    lost.close()  # dies without recording: the first notification stays leased
    assert [row["state"] for row in outbox(conn)] == ["PENDING", "PENDING"]

    graceful = receiving(Secrets(dict(SECRETS)))
    assert graceful.run_once(conn).claimed == 0  # the line waits for its leased head
    later = conn.execute("SELECT now() + interval '61 seconds' AS at").fetchone()["at"]
    drain(conn, graceful, now=later)  # the lease ran out
    assert graceful.run_once(conn, now=later).claimed == 0
    graceful.close(conn)
    keys = [request.headers["Idempotency-Key"] for request in receiver.received()]
    assert len(keys) == 3 and keys[0] == keys[1] != keys[2]
    assert [row["state"] for row in outbox(conn)] == ["DELIVERED", "DELIVERED"]


def test_a_graceful_stop_records_the_delivery_under_way(conn, receiver):
    receiver.hang = 0.5
    job = define(conn, now=T0, notify={"targets": [webhook(receiver)]})
    fail(conn, job, T0)
    stopping = receiving(Secrets(dict(SECRETS)))
    assert stopping.run_once(conn).claimed == 1
    assert stopping.close(conn).delivered  # waited for the receiver, then recorded it
    assert [row["state"] for row in outbox(conn)] == ["DELIVERED"]
    assert len(receiver.received()) == 1
