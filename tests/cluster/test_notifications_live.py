"""Notifications on the cluster: the real operator, real failing pods, real receivers.

A failing ScheduledJob in namespace A notifies A's receiver once per failed run, signed
with A's key, through an operator restart, a receiver outage of 60 s and an operator
killed during it; namespace B, with a Secret of
the same name and its own failing job, gets only its own notifications, signed with its
own key. The receivers are HTTP servers on this machine (the operator runs here too).
"""

from __future__ import annotations

import time

import pytest

from devenv.receiver import Receiver
from devenv.waiting import wait_for
from plugins.cluster import create_namespace
from plugins.operator import ScheduledJobs, busybox

pytestmark = pytest.mark.cluster

KEYS = {"a": b"key-of-namespace-a", "b": b"key-of-namespace-b"}
OUTAGE_SECONDS = 60


def notifying_job(receiver: Receiver) -> dict[str, object]:
    return {
        "schedule": "0 0 1 1 *",
        "jobTemplate": busybox("exit 3"),
        "notify": {
            "targets": [
                {
                    "name": "team",
                    "type": "Webhook",
                    "url": receiver.url,
                    "signingSecretRef": {"name": "pgsched-notify", "key": "hmac"},
                }
            ]
        },
    }


def signing_secret(cluster, namespace: str, key: bytes) -> None:
    cluster.api.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pgsched-notify"},
            "stringData": {"hmac": key.decode()},
        },
    )


def test_each_failed_run_notifies_its_own_namespace_once_through_a_kill_and_an_outage(
    cluster, operators, sj, namespace, conn
):
    other = f"{namespace[:50]}-b"
    create_namespace(cluster, other)
    receiver_a, receiver_b = Receiver().start(), Receiver().start()
    try:
        signing_secret(cluster, namespace, KEYS["a"])
        signing_secret(cluster, other, KEYS["b"])
        operators.namespace = f"{namespace},{other}"
        first = operators.start()
        sj_b = ScheduledJobs(cluster, other, conn)
        sj.apply("failing", notifying_job(receiver_a))
        sj_b.apply("failing", notifying_job(receiver_b))
        sj.annotate("failing", "pgsched.dev/run-now", "one")
        sj_b.annotate("failing", "pgsched.dev/run-now", "one")
        wait_for(lambda: receiver_a.received() and receiver_b.received(), 120, describe="both")

        first.stop()  # a restart: what the receivers took is recorded, not sent again
        receiver_a.stop()  # A's receiver goes down
        second = operators.start()
        sj.annotate("failing", "pgsched.dev/run-now", "two")
        sj.wait_runs("failing", lambda runs: len(runs) == 2 and runs[1]["status"] == "FAILED", 120)
        outage_began = time.monotonic()
        wait_for(
            lambda: conn.execute(
                "SELECT FROM pgsched.notifications WHERE namespace = %s AND attempts > 0"
                " AND state = 'PENDING'",
                [namespace],
            ).fetchall(),
            60,
            describe="a delivery attempt during the outage",
        )
        second.kill()  # a replica killed during the outage
        operators.start()
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_began)))
        receiver_a.start()  # back on the same port
        # A lease the killed replica held runs out first (60 s), then the backoff.
        wait_for(lambda: len(receiver_a.received()) >= 2, 180, describe="the second failure")
        time.sleep(5)  # a duplicate would arrive now
    finally:
        receiver_a.stop()
        receiver_b.stop()
        cluster.api.delete(f"/api/v1/namespaces/{other}")

    failed_a = [run["id"] for run in sj.runs("failing")]
    a, b = receiver_a.received(), receiver_b.received()
    assert sorted(request.json["run"]["id"] for request in a) == failed_a
    assert len({request.headers["Idempotency-Key"] for request in a}) == len(a) == 2
    assert all(r.signed_by(KEYS["a"]) and not r.signed_by(KEYS["b"]) for r in a)
    assert {r.json["scheduledJob"]["namespace"] for r in a} == {namespace}
    assert len(b) == 1 and b[0].signed_by(KEYS["b"])
    assert b[0].json["scheduledJob"]["namespace"] == other
    assert {r.json["event"] for r in a + b} == {"failed"}
