"""Namespaces served by their labels (``PGSCHED_NAMESPACE_SELECTOR``, the chart's default),
on the real API server and node, with the operator as a process of this checkout:

- a namespace labelled while the operator runs is served within seconds, ScheduledJobs
  applied before the label included; one without the label is left alone; one whose label
  is removed is left alone from then on;
- ``kubectl delete namespace`` with a run running: the run is cancelled by the namespace's
  deletion (recorded so) and the finalizer released within its cancelGraceSeconds plus a
  few seconds, and the namespace goes — with two replicas up, and when every replica was
  down while the deletion began. With replicas up, the run is asked to stop before
  Kubernetes begins deleting the namespace's pods (it waits 5 s first), though Kubernetes
  deletes the ScheduledJob itself only once the pods are gone.

Each test labels with a key of its own: other tests' operators share this cluster.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from devenv.adminclient import ApiError
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.engine import runs
from pgsched.k8s.client import api
from pgsched.k8s.client.finalizers import FINALIZER
from plugins.cluster import create_namespace, delete_namespace, namespace_gone
from plugins.operator import ScheduledJobs, busybox

pytestmark = pytest.mark.cluster

# The served namespaces' Ready must show within this long of the label (issue: 5 s).
SERVED_WITHIN_SECONDS = 5.0
# A ScheduledJob nobody serves has no status; this long without one is taken as "left alone"
# (an operator that served it writes one within a second).
LEFT_ALONE_SECONDS = 3.0
FAST_HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 5, "orphanTimeoutSeconds": 30}
# The pod ignores SIGTERM: it goes at its terminationGracePeriodSeconds.
STUBBORN = "trap '' TERM; sleep 300"
POD_GRACE_SECONDS = 3
CANCEL_GRACE_SECONDS = 3
# The namespace controller waits this long after a namespace's deletion before it deletes
# anything in it (namespaceDeletionGracePeriod in kube-controller-manager), then the pods.
KUBERNETES_WAITS_SECONDS = 5.0
# After the run's cancelGraceSeconds: the engine ends the run, the ScheduledJob's deletion
# sync looks again (every 2 s) and patches the finalizer off.
RELEASED_WITHIN_SECONDS = 10.0


@pytest.fixture
def label() -> str:
    return f"pgsched.dev/serve-{secrets.token_hex(3)}"


@pytest.fixture
def selected(operators, label: str):  # type: ignore[no-untyped-def]
    """Start an operator (``count`` replicas) serving the namespaces labelled ``label``."""

    def start(count: int = 1) -> None:
        for _ in range(count):
            operators.start(PGSCHED_NAMESPACES="", PGSCHED_NAMESPACE_SELECTOR=f"{label}=true")

    return start


@pytest.fixture
def other(cluster: ControlPlane) -> Iterator[str]:
    """A second namespace, without any label."""
    name = f"t-unlabelled-{secrets.token_hex(3)}"
    create_namespace(cluster, name)
    yield name
    delete_namespace(cluster, name)


def set_label(cluster: ControlPlane, namespace: str, label: str, value: str | None) -> None:
    cluster.api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {label: value}}})


def ready(jobs: ScheduledJobs, name: str) -> bool:
    condition = jobs.condition(name)
    return condition is not None and condition["status"] == "True"


def plain(jobs: ScheduledJobs, name: str) -> None:
    jobs.apply(name, {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")})


def test_a_namespace_labelled_while_the_operator_runs_is_served_within_seconds(
    selected, sj, cluster, namespace, other, label, conn
):
    plain(sj, "before")  # applied before anyone serves the namespace
    selected()
    time.sleep(LEFT_ALONE_SECONDS)
    assert sj.condition("before") is None, "served before the namespace was labelled"

    set_label(cluster, namespace, label, "true")
    labelled = time.monotonic()
    wait_for(lambda: ready(sj, "before"), 30, describe="the earlier ScheduledJob to be Ready")
    took = time.monotonic() - labelled
    print(f"\nReady {took:.2f}s after the label")
    assert took <= SERVED_WITHIN_SECONDS, f"served {took:.1f}s after the label"
    applied = time.monotonic()
    plain(sj, "after")
    wait_for(lambda: ready(sj, "after"), 30, describe="the new ScheduledJob to be Ready")
    took = time.monotonic() - applied
    print(f"Ready {took:.2f}s after kubectl apply in the labelled namespace")
    assert took <= SERVED_WITHIN_SECONDS, f"Ready {took:.1f}s after apply"

    # Another namespace, never labelled: nothing of it reaches the operator or its database.
    elsewhere = ScheduledJobs(cluster, other, conn)
    plain(elsewhere, "unserved")
    # The label taken away: from then on the namespace is left alone too.
    set_label(cluster, namespace, label, None)
    time.sleep(1.0)  # the Namespace watch hears of it
    plain(sj, "late")
    time.sleep(LEFT_ALONE_SECONDS)
    assert elsewhere.condition("unserved") is None
    assert sj.condition("late") is None
    stored = {
        row["name"] for row in conn.execute("SELECT name FROM pgsched.job_definitions").fetchall()
    }
    assert stored == {"before", "after"}


def start_stubborn_run(jobs: ScheduledJobs, name: str) -> dict:  # type: ignore[type-arg]
    jobs.apply(
        name,
        {
            "schedule": "0 0 1 1 *",
            "cancelGraceSeconds": CANCEL_GRACE_SECONDS,
            "heartbeat": FAST_HEARTBEAT,
            "jobTemplate": busybox(STUBBORN, terminationGracePeriodSeconds=POD_GRACE_SECONDS),
        },
        annotations={"pgsched.dev/run-now": "go"},
    )
    [run] = jobs.wait_runs(
        name, lambda found: found and found[0]["heartbeat_at"], 90, "a heartbeat"
    )
    return run


def released(cluster: ControlPlane, namespace: str, name: str) -> bool:
    """Whether pgsched's finalizer is off the ScheduledJob (or the ScheduledJob is gone)."""
    try:
        found = cluster.api.get(api.scheduled_job_path(namespace, name))
    except ApiError as error:
        if error.status == 404:
            return True
        raise
    return FINALIZER not in (found["metadata"].get("finalizers") or [])


def deleted_with_its_runs_cancelled(
    cluster: ControlPlane, jobs: ScheduledJobs, asked: float, namespace: str
) -> None:
    """pgsched's part of the deletion — the run cancelled, recorded as by the namespace's
    deletion, and the ScheduledJob's finalizer released — is done within the run's
    cancelGraceSeconds plus a few seconds. The namespace then goes at Kubernetes' pace (its
    5 s wait, the pods' grace, its controller's passes, which a loaded machine stretches:
    30 s in a full test run, 26 of them after the finalizer was released)."""
    budget = CANCEL_GRACE_SECONDS + RELEASED_WITHIN_SECONDS
    wait_for(lambda: released(cluster, namespace, "stubborn"), 120, describe="the finalizer")
    took = time.monotonic() - asked
    wait_for(lambda: namespace_gone(cluster, namespace), 120, describe="the namespace to go")
    gone = time.monotonic() - asked
    print(
        f"\nfinalizer released {took:.1f}s, namespace gone {gone:.1f}s after the deletion"
        " was the operator's to finish"
    )
    [done] = jobs.runs("stubborn")
    assert done["status"] == "CANCELLED", done
    assert done["cancelled_by"] == runs.BY_NAMESPACE_DELETION
    assert took <= budget, f"the finalizer was released {took:.1f}s after (budget {budget}s)"


def test_deleting_a_served_namespace_cancels_its_runs_and_the_namespace_goes(
    selected, sj, cluster, namespace, label
):
    set_label(cluster, namespace, label, "true")
    selected(count=2)
    start_stubborn_run(sj, "stubborn")

    asked, asked_at = time.monotonic(), datetime.now(UTC)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")

    deleted_with_its_runs_cancelled(cluster, sj, asked, namespace)
    [done] = sj.runs("stubborn")
    stop_asked = (done["cancel_requested_at"] - asked_at).total_seconds()
    print(f"run asked to stop {stop_asked:.1f}s after kubectl delete namespace")
    assert stop_asked < KUBERNETES_WAITS_SECONDS, (
        f"the run was asked to stop {stop_asked:.1f}s after the namespace's deletion: after"
        " Kubernetes began deleting its pods"
    )


def test_a_namespace_deleted_while_no_operator_ran_goes_once_one_starts(
    selected, operators, sj, cluster, namespace, label
):
    set_label(cluster, namespace, label, "true")
    selected()
    start_stubborn_run(sj, "stubborn")
    operators.stop_all()

    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    time.sleep(2.0)
    assert not namespace_gone(cluster, namespace)  # the finalizer holds it for pgsched
    selected()  # healthy: from here the deletion is the operator's to finish
    asked = time.monotonic()

    deleted_with_its_runs_cancelled(cluster, sj, asked, namespace)
