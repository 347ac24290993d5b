"""A status write starts from the ScheduledJob as the operator's watch last delivered it:
one PATCH, no GET first (k8s/client/latest.py). Against a real API server, a copy that is
behind (changed since, deleted, deleted and created again under the same name) still ends
in the right status or in nothing, never in an error that stops the publisher."""

from __future__ import annotations

from uuid import UUID

import pytest
import yaml
from prometheus_client import REGISTRY

from cluster.test_publisher_isolation import launched
from devenv.controlplane import ControlPlane
from factories import define
from pgsched.engine import runs
from pgsched.k8s.client import api
from pgsched.k8s.client.controller import by_uid
from pgsched.k8s.client.latest import LatestObjects
from pgsched.k8s.client.watch import Event
from pgsched.k8s.reporting.publisher import Publisher
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

SCHEDULE = "0 0 1 1 *"


def apply(cluster: ControlPlane, namespace: str, name: str) -> dict:
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": SCHEDULE, "jobTemplate": busybox("true")},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    return cluster.api.get(api.scheduled_job_path(namespace, name))


def requests(verb: str) -> float:
    """Requests of ``verb`` this process sent, by pgsched_kube_requests_total, any answer."""
    return sum(
        REGISTRY.get_sample_value("pgsched_kube_requests_total", {"verb": verb, "code": code})
        or 0.0
        for code in ("200", "201", "404", "409")
    )


@pytest.fixture
def kube(cluster: ControlPlane) -> api.KubeApi:
    return api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))


def watched(latest: LatestObjects, obj: dict, kind: str = "MODIFIED") -> None:
    """Deliver ``obj`` as the ScheduledJobs' watch would, through the operator's select."""
    assert latest.observing(by_uid)(Event(kind, obj)) == (obj["metadata"]["uid"], Event(kind, obj))


def report_watched(cluster: ControlPlane, conn, namespace: str):
    """ScheduledJob report, its definition, and copies holding it as the watch delivered it."""
    obj = apply(cluster, namespace, "report")
    definition = define(conn, "report", namespace=namespace, uid=UUID(obj["metadata"]["uid"]),
                        schedule=SCHEDULE)  # fmt: skip
    latest = LatestObjects(api.scheduled_job_path)
    watched(latest, obj, "ADDED")
    return api.scheduled_job_path(namespace, "report"), definition, latest


def test_a_status_from_the_watched_copy_is_one_patch_and_no_read(
    cluster, crd, conn, namespace, kube
):
    path, definition, latest = report_watched(cluster, conn, namespace)
    publisher = Publisher(kube, latest=latest)

    launched(conn, definition.id, "first")
    gets, patches = requests("GET"), requests("PATCH")
    result = publisher.run_once(conn)
    assert definition.id in result.definitions and result.statuses == 1
    assert requests("GET") == gets, "the watched copy was read instead"
    assert requests("PATCH") == patches + 1
    assert cluster.api.get(path)["status"]["active"] == 1

    # The write's answer is the new copy: the next status needs no read either.
    runs.run_now(conn, definition.id, token="second")  # queued behind the first (cap 1)
    gets = requests("GET")
    assert publisher.run_once(conn).statuses == 1 and requests("GET") == gets
    assert cluster.api.get(path)["status"]["queued"] == 1
    assert (
        latest.get(path)["metadata"]["resourceVersion"]
        == (cluster.api.get(path)["metadata"]["resourceVersion"])
    )


def test_a_copy_behind_a_change_is_refused_read_again_and_the_status_is_right(
    cluster, crd, conn, namespace, kube
):
    path, definition, latest = report_watched(cluster, conn, namespace)
    # Another writer changed the object since the copy (the watch has not delivered it).
    changed = cluster.api.patch(path, {"metadata": {"labels": {"team": "a"}}})
    publisher = Publisher(kube, latest=latest)

    launched(conn, definition.id, "first")
    conflicts = (
        REGISTRY.get_sample_value("pgsched_kube_requests_total", {"verb": "PATCH", "code": "409"})
        or 0.0
    )
    assert publisher.run_once(conn).statuses == 1
    assert (
        REGISTRY.get_sample_value("pgsched_kube_requests_total", {"verb": "PATCH", "code": "409"})
        == conflicts + 1
    ), "the stale copy's write was refused"
    now = cluster.api.get(path)
    assert now["status"]["active"] == 1 and now["metadata"]["labels"] == {"team": "a"}
    assert now["metadata"]["resourceVersion"] != changed["metadata"]["resourceVersion"]
    assert latest.get(path)["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]


def test_a_copy_of_a_deleted_scheduled_job_is_dropped_and_the_batch_goes_on(
    cluster, crd, conn, namespace, kube
):
    gone_path = api.scheduled_job_path(namespace, "gone")
    gone = apply(cluster, namespace, "gone")
    calm = apply(cluster, namespace, "calm")
    latest = LatestObjects(api.scheduled_job_path)
    ids = {}
    for obj in (gone, calm):
        name = obj["metadata"]["name"]
        ids[name] = define(conn, name, namespace=namespace, uid=UUID(obj["metadata"]["uid"]),
                           schedule=SCHEDULE).id  # fmt: skip
        watched(latest, obj, "ADDED")
    cluster.api.delete(gone_path)  # its DELETED not delivered yet
    launched(conn, ids["gone"], "first")
    launched(conn, ids["calm"], "first")

    result = Publisher(kube, latest=latest).run_once(conn)
    assert set(result.definitions) == set(ids.values()) and result.statuses == 1
    assert latest.get(gone_path) is None
    assert cluster.api.get(api.scheduled_job_path(namespace, "calm"))["status"]["active"] == 1
    left = conn.execute("SELECT count(*) AS n FROM pgsched.run_events").fetchone()["n"]
    assert left == 0


def test_a_copy_of_a_namesake_is_not_written_against_the_new_object_is_read(
    cluster, crd, conn, namespace, kube
):
    path = api.scheduled_job_path(namespace, "report")
    old = apply(cluster, namespace, "report")
    latest = LatestObjects(api.scheduled_job_path)
    watched(latest, old, "ADDED")
    cluster.api.delete(path)
    new = apply(cluster, namespace, "report")  # created again: a new uid, the copy the old
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    definition = define(conn, "report", namespace=namespace, uid=UUID(new["metadata"]["uid"]),
                        schedule=SCHEDULE)  # fmt: skip
    launched(conn, definition.id, "first")

    gets = requests("GET")
    assert Publisher(kube, latest=latest).run_once(conn).statuses == 1
    assert requests("GET") == gets + 1  # the copy was a namesake's: read
    assert cluster.api.get(path)["status"]["active"] == 1
    assert latest.get(path)["metadata"]["uid"] == new["metadata"]["uid"]

    watched(latest, new, "DELETED")
    assert latest.get(path) is None and len(latest) == 0
