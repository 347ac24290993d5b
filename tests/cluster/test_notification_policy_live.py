"""A namespace's NotificationPolicy on the cluster: the real operator, real failing pods,
real receivers.

Namespaces A and B each have a NotificationPolicy ``default`` naming their own receiver
(signed with the key of their own Secret of the same name) and a failing ScheduledJob
without spec.notify; A also has a failing job that opts out (``notify: {inherit: false}``).
A's receiver gets exactly one notification per failed run of A's job, each with its own
idempotency key, and none of the opted-out job's; B's receiver gets only B's. The API server refuses a
policy of another name (the CRD's rule), and the job's status says where its
notifications come from.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from cluster.test_notifications_live import KEYS, signing_secret
from devenv.commands import CommandError
from devenv.receiver import Receiver
from devenv.waiting import wait_for
from plugins.cluster import create_namespace
from plugins.operator import ScheduledJobs, busybox

pytestmark = pytest.mark.cluster


def apply_policy(cluster, namespace: str, receiver: Receiver, name: str = "default") -> None:
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "NotificationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
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
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


FAILING = {"schedule": "0 0 1 1 *", "jobTemplate": busybox("exit 3")}


def test_a_policy_notifies_each_failed_run_of_its_namespace_once_and_no_other_namespace(
    cluster, operators, sj, namespace, conn
):
    other = f"{namespace[:50]}-b"
    create_namespace(cluster, other)
    receiver_a, receiver_b = Receiver().start(), Receiver().start()
    try:
        signing_secret(cluster, namespace, KEYS["a"])
        signing_secret(cluster, other, KEYS["b"])
        with pytest.raises(CommandError) as refused:
            apply_policy(cluster, namespace, receiver_a, name="team-a")
        assert (
            "a namespace has one NotificationPolicy, named default" in refused.value.result.stderr
        )
        apply_policy(cluster, namespace, receiver_a)
        apply_policy(cluster, other, receiver_b)
        operators.namespace = f"{namespace},{other}"
        operators.start()
        sj_b = ScheduledJobs(cluster, other, conn)
        sj.apply("failing", FAILING)
        sj.apply("quiet", {**FAILING, "notify": {"inherit": False}})  # the opt-out
        sj_b.apply("failing", FAILING)
        wait_for(
            lambda: (sj.get("failing").get("status") or {}).get("notifications"),
            60,
            describe="status.notifications of A's job",
        )
        for token in ("one", "two"):
            sj.annotate("failing", "pgsched.dev/run-now", token)
            count = {"one": 1, "two": 2}[token]
            sj.wait_runs(
                "failing",
                lambda runs, n=count: len(runs) == n and runs[-1]["status"] == "FAILED",
                120,
            )
        sj.annotate("quiet", "pgsched.dev/run-now", "one")
        sj_b.annotate("failing", "pgsched.dev/run-now", "one")
        wait_for(
            lambda: len(receiver_a.received()) >= 2 and receiver_b.received(),
            120,
            describe="A's two failures and B's one at their receivers",
        )
        sj.wait_runs("quiet", lambda runs: runs and runs[-1]["status"] == "FAILED", 120)
        time.sleep(5)  # a duplicate, a stray of the other namespace or of quiet: now
        quiet = sj.get("quiet")["status"]
        status = sj.get("failing")["status"]["notifications"]
        policy = json.loads(
            cluster.kubectl("get", "np", "default", "-n", namespace, "-o", "json").stdout
        )
    finally:
        receiver_a.stop()
        receiver_b.stop()
        cluster.api.delete(f"/api/v1/namespaces/{other}")

    assert status == {
        "source": "NotificationPolicy default",
        "failedOn": "FinalAttempt",
        "targets": ["team (Webhook)"],
    }
    assert quiet["notifications"]["source"] == "none (spec.notify.inherit: false)"
    assert next(c for c in quiet["conditions"] if c["type"] == "Ready")["status"] == "True"
    [ready] = policy["status"]["conditions"]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    failed_a = [run["id"] for run in sj.runs("failing")]
    a, b = receiver_a.received(), receiver_b.received()
    assert sorted(request.json["run"]["id"] for request in a) == failed_a
    assert len({request.headers["Idempotency-Key"] for request in a}) == len(a) == 2
    assert all(r.signed_by(KEYS["a"]) and not r.signed_by(KEYS["b"]) for r in a)
    assert {r.json["scheduledJob"]["namespace"] for r in a} == {namespace}
    assert {r.json["scheduledJob"]["name"] for r in a} == {"failing"}  # not quiet
    assert len(b) == 1 and b[0].signed_by(KEYS["b"])
    assert b[0].json["scheduledJob"]["namespace"] == other
    assert {r.json["event"] for r in a + b} == {"failed"}
