"""A namespace's NotificationPolicy, against the real database and real HTTP receivers.

The effective configuration of a job — its own spec.notify, its namespace's policy, both,
or none — is computed by the trigger's own SQL function, so what the status and
``pgsched describe`` say is what the outbox gets. A policy reaches only its own
namespace's jobs, and its Secrets are read from that namespace. A policy applied, edited
or deleted counts from the next change on, with nothing restarted; its controller
re-renders the statuses of the jobs that follow it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from cli_runner import pgsched
from db.test_notifications import (
    KEY,
    SECRETS,
    T0,
    Secrets,
    StatusApi,
    claimed_run,
    drain,
    end_run,
    fail,
    outbox,
    receiving,
    webhook,
)
from devenv.receiver import Receiver
from factories import define
from pgsched.db import connection
from pgsched.engine import notifications
from pgsched.k8s.client import finalizers
from pgsched.k8s.client.watch import Event
from pgsched.k8s.kinds import notificationpolicies
from pgsched.k8s.reporting.publisher import Publisher

KEY_B = b"team-b-signing-key"


@pytest.fixture
def receivers():
    found = {name: Receiver().start() for name in ("policy", "own", "other")}
    yield found
    for server in found.values():
        server.stop()


def policy(conn, namespace, *targets, **fields):
    with conn.transaction():
        notifications.upsert_policy(conn, namespace, {"targets": list(targets), **fields})


def delivered(conn, *, secrets=None):
    notify = receiving(secrets or Secrets(dict(SECRETS)), timeout=2.0, deadline=3.0)
    try:
        drain(conn, notify)
    finally:
        notify.close()


def received_runs(receiver):
    return [(request.json["run"]["id"], request.json["event"]) for request in receiver.received()]


def test_a_job_without_spec_notify_is_notified_as_its_namespaces_policy_says(conn, receivers):
    policy(conn, "default", webhook(receivers["policy"], "oncall"))
    job = define(conn, now=T0)
    run = fail(conn, job, T0)
    secrets = Secrets(dict(SECRETS))
    delivered(conn, secrets=secrets)

    [request] = receivers["policy"].received()
    assert request.json["event"] == "failed" and request.json["run"]["id"] == run.id
    assert request.signed_by(KEY)
    assert request.headers["Idempotency-Key"] == f"{job.id}/{run.id}/failed/oncall"
    assert secrets.asked == [("default", "hooks", "hmac")]  # the policy's own namespace
    found = notifications.effective(conn, job.id)
    assert found is not None and found.summary == "oncall (Webhook) from NotificationPolicy default"


def test_a_policy_never_reaches_another_namespaces_jobs(conn, receivers):
    """Namespace A's policy; a job of namespace B without spec.notify fails, and B's own
    policy is the only one that hears of it — signed with the key of B's Secret of the
    same name, read from B."""
    policy(conn, "team-a", webhook(receivers["policy"], "oncall"))
    policy(conn, "team-b", webhook(receivers["other"], "oncall"))
    job_b = define(conn, namespace="team-b", now=T0)
    lonely = define(conn, namespace="team-c", now=T0)  # no policy in team-c
    run_b = fail(conn, job_b, T0)
    fail(conn, lonely, T0)
    secrets = Secrets({("team-a", "hooks", "hmac"): KEY, ("team-b", "hooks", "hmac"): KEY_B})
    delivered(conn, secrets=secrets)

    assert receivers["policy"].received() == []
    assert received_runs(receivers["other"]) == [(run_b.id, "failed")]
    [request] = receivers["other"].received()
    assert request.signed_by(KEY_B) and not request.signed_by(KEY)
    assert request.json["scheduledJob"]["namespace"] == "team-b"
    assert secrets.asked == [("team-b", "hooks", "hmac")]
    rows = conn.execute("SELECT namespace FROM pgsched.notifications").fetchall()
    assert [row["namespace"] for row in rows] == ["team-b"]
    assert notifications.effective(conn, lonely.id) is None


def test_a_job_with_its_own_targets_replaces_the_policy_inherits_it_or_opts_out(conn, receivers):
    policy(
        conn,
        "default",
        webhook(receivers["policy"], "oncall"),
        webhook(receivers["policy"], "shared"),
    )
    own = define(conn, "own", now=T0, notify={"targets": [webhook(receivers["own"], "mine")]})
    both = define(
        conn,
        "both",
        now=T0,
        notify={
            "inherit": True,
            "failedOn": "EachAttempt",
            # Same name as the policy's: this one replaces it.
            "targets": [webhook(receivers["own"], "shared")],
        },
    )
    quiet = define(conn, "quiet", now=T0, notify={"inherit": False})
    runs = {job.name: fail(conn, job, T0) for job in (own, both, quiet)}
    delivered(conn)

    shown = {job.name: notifications.effective(conn, job.id) for job in (own, both, quiet)}
    assert shown["own"].source == "spec.notify" and shown["own"].targets == ("mine (Webhook)",)
    assert shown["both"].source == "spec.notify and NotificationPolicy default"
    assert shown["both"].targets == ("oncall (Webhook)", "shared (Webhook)")
    assert shown["both"].failed_on == "EachAttempt"
    assert shown["quiet"].source == "none (spec.notify.inherit: false)"
    assert shown["quiet"].targets == ()

    by_target = sorted((row["target_name"], row["event"]) for row in outbox(conn))
    # own: its target only. both: the policy's oncall and its own shared, each attempt
    # (failedOn: EachAttempt, its own). quiet: nothing.
    assert by_target == [("mine", "failed"), ("oncall", "failed"), ("shared", "failed")]
    # Two targets of two jobs share this receiver; across targets and jobs delivery has
    # no order (docs/notifications.md, "Ordering"), so compare without it.
    assert sorted(received_runs(receivers["own"])) == sorted(
        [(runs["own"].id, "failed"), (runs["both"].id, "failed")]
    )
    assert received_runs(receivers["policy"]) == [(runs["both"].id, "failed")]
    names = sorted(r.json["scheduledJob"]["name"] for r in receivers["own"].received())
    assert names == ["both", "own"]


def test_a_policy_change_applies_to_the_next_change_and_a_deleted_policy_sends_nothing(
    conn, receivers
):
    job = define(conn, now=T0)
    policy(conn, "default", webhook(receivers["policy"], "oncall"))
    first = fail(conn, job, T0)
    policy(conn, "default", webhook(receivers["own"], "oncall"), failedOn="EachAttempt")
    second = fail(conn, job, T0 + timedelta(minutes=1))
    with conn.transaction():
        assert notifications.delete_policy(conn, "default")
    fail(conn, job, T0 + timedelta(minutes=2))
    delivered(conn)

    assert received_runs(receivers["policy"]) == [(first.id, "failed")]
    assert received_runs(receivers["own"]) == [(second.id, "failed")]
    assert len(outbox(conn)) == 2
    assert notifications.effective(conn, job.id) is None


def test_a_policy_cannot_be_stored_by_the_job_role(conn, job_dsn):
    """A job pod's login must not plant a policy to read its namespace's failures."""
    with (
        connection.connect(job_dsn, application_name="pgsched-test-job") as job_conn,
        pytest.raises(Exception, match="permission denied"),
    ):
        job_conn.execute(
            "INSERT INTO pgsched.notification_policies (namespace, notify) VALUES ('default', '{}')"
        )


class PolicyApi(StatusApi):
    """StatusApi that also keeps the NotificationPolicy's own status."""

    def __init__(self, conn):
        super().__init__(conn)
        self.policy_status: dict = {}
        self.policy_metadata: list[dict] = []  # finalizer patches

    def merge_patch(self, path, body):
        if "/notificationpolicies/" in path:
            if "status" in body:
                self.policy_status = body["status"] or {}
            else:
                self.policy_metadata.append(body["metadata"])
            return body
        return super().merge_patch(path, body)


@contextmanager
def policies(dsn: str, api: PolicyApi) -> Iterator[notificationpolicies.NotificationPolicies]:
    """The NotificationPolicy controller on ``api``, with a pool of its own."""
    with connection.pool(dsn, name="pgsched-test-policies", max_size=2) as pool:
        yield notificationpolicies.NotificationPolicies(
            pool, api, Publisher(api), clock=lambda: None
        )


def policy_event(kind, targets, *, name="default", generation=1):
    return Event(
        kind,
        {
            "metadata": {
                "namespace": "default",
                "name": name,
                "uid": "p1",
                "generation": generation,
                "resourceVersion": str(generation),
                "creationTimestamp": "2026-06-01T00:00:00Z",
                "finalizers": [finalizers.FINALIZER],
            },
            "spec": {"targets": targets},
        },
    )


def test_the_controller_stores_the_policy_and_re_renders_the_statuses_that_follow_it(
    conn, dsn, receivers
):
    """Applied, edited, deleted: each time the statuses of the jobs without spec.notify say
    where their notifications come from, and `pgsched describe` of a run says the same.
    A job with its own targets is not re-rendered (its status does not change)."""
    follower = define(conn, "follower", now=T0)
    define(conn, "own", now=T0, notify={"targets": [webhook(receivers["own"], "mine")]})
    run = claimed_run(conn, follower, T0)
    end_run(conn, run, "COMPLETED", T0)
    api = PolicyApi(conn)
    with policies(dsn, api) as controller:
        hook = webhook(receivers["policy"], "oncall")
        assert controller.handle("p1", policy_event("ADDED", [hook])) is None
        assert api.statuses["follower"]["notifications"] == {
            "source": "NotificationPolicy default",
            "failedOn": "FinalAttempt",
            "targets": ["oncall (Webhook)"],
        }
        assert "own" not in api.statuses
        [ready] = api.policy_status["conditions"]
        assert (ready["status"], ready["reason"]) == ("True", "InForce")
        described = pgsched("describe", str(run.id), dsn=dsn).out
        assert "oncall (Webhook) from NotificationPolicy default" in described
        as_json = json.loads(pgsched("describe", str(run.id), "-o", "json", dsn=dsn).out)
        assert as_json["notifications"] == api.statuses["follower"]["notifications"]

        # A new URL applies to the next change, and shows on no status: none is patched.
        patched = len(api.patched)
        moved = {**hook, "url": receivers["own"].url}
        controller.handle("p1", policy_event("MODIFIED", [moved], generation=2))
        assert len(api.patched) == patched
        chat = {"name": "chat", "type": "Slack", "url": receivers["other"].url}
        controller.handle("p1", policy_event("MODIFIED", [hook, chat], generation=2))
        assert api.statuses["follower"]["notifications"]["targets"] == [
            "oncall (Webhook)",
            "chat (Slack)",
        ]

        # Invalid: refused with the field named; the stored form stays in force.
        bad = policy_event("MODIFIED", [{**chat, "type": "Email"}], generation=3)
        controller.handle("p1", bad)
        [ready] = api.policy_status["conditions"]
        assert ready["status"] == "False" and "spec.targets[0].type: 'Email'" in ready["message"]
        assert len(notifications.effective(conn, follower.id).targets) == 2

        controller.handle("p1", policy_event("DELETED", [hook, chat], generation=2))
        assert api.statuses["follower"]["notifications"] is None
        assert notifications.effective(conn, follower.id) is None


def test_a_policy_whose_namespace_is_going_is_forgotten_and_lets_go_before_it_is_deleted(
    conn, dsn, receivers
):
    """Kubernetes deletes a terminating namespace's objects only once its pods are gone; a
    finalizer still held then costs the namespace another pass (8 s). Once the Namespace
    watch has seen the deletion begin, the next event of a policy there is its deletion."""
    follower = define(conn, "follower", now=T0)
    api = PolicyApi(conn)
    with policies(dsn, api) as controller:
        hook = webhook(receivers["policy"], "oncall")
        assert controller.handle("p1", policy_event("ADDED", [hook])) is None
        assert notifications.effective(conn, follower.id) is not None
        assert api.policy_metadata == []

        api.endings.watched("default", datetime(2026, 6, 2, tzinfo=UTC))
        patched = len(api.patched)
        assert controller.handle("p1", policy_event("MODIFIED", [hook])) is None
        assert notifications.effective(conn, follower.id) is None
        assert api.policy_metadata == [{"finalizers": None, "resourceVersion": "1"}]
        # Its jobs go with the namespace: no status is re-rendered for them.
        assert len(api.patched) == patched


def test_a_null_spec_notify_follows_the_policy_and_inherit_without_one_keeps_its_own(
    conn, receivers
):
    """`notify: null` (a client that kept the null) is no spec.notify: it must not read as
    an opt-out. `inherit: true` where the namespace has no policy sends its own targets."""
    policy(conn, "default", webhook(receivers["policy"], "oncall"))
    nulled = define(conn, "nulled", now=T0, notify=None)
    assert conn.execute(
        "SELECT spec->'notify' = 'null'::jsonb AS kept FROM pgsched.job_definitions WHERE id = %s",
        [nulled.id],
    ).fetchone()["kept"]
    alone = define(
        conn,
        "alone",
        namespace="team-c",
        now=T0,
        notify={"inherit": True, "targets": [webhook(receivers["own"], "mine")]},
    )
    runs = {job.name: fail(conn, job, T0) for job in (nulled, alone)}
    delivered(conn, secrets=Secrets({**SECRETS, ("team-c", "hooks", "hmac"): KEY}))

    assert received_runs(receivers["policy"]) == [(runs["nulled"].id, "failed")]
    assert received_runs(receivers["own"]) == [(runs["alone"].id, "failed")]
    found = notifications.effective(conn, alone.id)
    assert found is not None and found.targets == ("mine (Webhook)",)
    assert found.source == "spec.notify (inherit: true, but no NotificationPolicy default)"
    assert nulled.id in notifications.policy_members(conn, "default")
