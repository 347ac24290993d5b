"""A namespace whose Events and status writes the API server refuses (here: it is being
deleted) does not hold up another namespace's: the publisher drops the refused namespace's
changes from the outbox with a warning and publishes the rest. Before, the refusal (403)
rolled the whole batch back, so the same batch was tried again and again and every
namespace's `kubectl get sj` froze until the refusing namespace was gone."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from uuid import UUID

import pytest
import yaml
from prometheus_client import REGISTRY

from devenv.adminclient import ApiError
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, runs
from pgsched.k8s.client import api, reads
from pgsched.k8s.reporting.publisher import GOING, Publisher
from plugins.cluster import create_namespace, delete_namespace, namespace_gone
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

HOLD = "pgsched.dev/test-hold"


@pytest.fixture
def terminating(cluster: ControlPlane, crd: None) -> Iterator[str]:
    """A namespace being deleted, held Terminating by a ConfigMap's finalizer: the API
    server refuses to create anything in it (403 Forbidden), as during any deletion."""
    name = f"t-doomed-{secrets.token_hex(3)}"
    create_namespace(cluster, name)
    holder = f"/api/v1/namespaces/{name}/configmaps/hold"
    cluster.api.create(
        f"/api/v1/namespaces/{name}/configmaps",
        {"metadata": {"name": "hold", "finalizers": [HOLD]}, "data": {}},
    )
    yield name
    cluster.api.patch(holder, {"metadata": {"finalizers": None}})


def scheduled_job(cluster: ControlPlane, conn, namespace: str, name: str) -> UUID:
    """A ScheduledJob and its definition (its uid the definition's id, as the operator's
    sync stores it)."""
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    found = cluster.api.get(api.scheduled_job_path(namespace, name))
    uid = UUID(found["metadata"]["uid"])
    define(conn, name, namespace=namespace, uid=uid, schedule="0 0 1 1 *")
    return uid


def refused_requests() -> float:
    """Requests the API server answered 403, as pgsched_kube_requests_total counts them."""
    return sum(
        REGISTRY.get_sample_value("pgsched_kube_requests_total", {"verb": verb, "code": "403"})
        or 0.0
        for verb in ("POST", "PATCH")
    )


def launched(conn, definition_id: UUID, token: str) -> None:
    runs.run_now(conn, definition_id, token=token)
    assert dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition_id]).claimed


def test_a_namespace_being_deleted_does_not_hold_up_another_namespaces_statuses_and_events(
    cluster, crd, conn, namespace, terminating, caplog
):
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    calm = scheduled_job(cluster, conn, namespace, "calm")
    doomed = scheduled_job(cluster, conn, terminating, "doomed")
    launched(conn, doomed, "first")
    launched(conn, calm, "first")
    cluster.api.delete(f"/api/v1/namespaces/{terminating}")
    wait_for(
        lambda: (
            cluster.api.get(f"/api/v1/namespaces/{terminating}")["status"]["phase"] == "Terminating"
        ),
        30,
        describe=f"namespace {terminating} Terminating",
    )

    publisher = Publisher(kube)
    with caplog.at_level(logging.WARNING, logger="pgsched.k8s.reporting.publisher"):
        result = publisher.run_once(conn)
        runs.run_now(conn, doomed, token="second")  # QUEUED: its job is at its cap
        refusals = refused_requests()
        again = publisher.run_once(conn)

    assert calm in result.definitions and list(result.refused) == [terminating]
    assert "403" in result.refused[terminating] and list(again.refused) == [terminating]
    # The refusal said the namespace is going: its later changes cost no request at all.
    assert again.refused[terminating] == GOING and refused_requests() == refusals
    left = conn.execute("SELECT count(*) AS n FROM pgsched.run_events").fetchone()["n"]
    assert left == 0, "nothing stays on the outbox to be tried again and again"
    status = cluster.api.get(api.scheduled_job_path(namespace, "calm"))["status"]
    assert status["active"] == 1, status
    reasons = {
        item["reason"]
        for item in cluster.api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        if item["involvedObject"]["name"] == "calm"
    }
    assert "RunLaunched" in reasons, reasons
    warnings = [record.getMessage() for record in caplog.records if terminating in record.message]
    assert len(warnings) == 1, f"one warning per namespace a minute, not per batch: {warnings}"
    assert "every other namespace's go on" in warnings[0]


def test_a_namespace_seen_going_is_not_asked_about_again_until_one_of_its_name_is_created_anew(
    cluster, crd
):
    """During a namespace's deletion every run of it ends and every ScheduledJob's
    finalizer runs, and each asked whether the namespace is going (a run it stopped is
    cancelled, not failed). Once seen going, the namespace answers for every object created
    before its deletion from memory; an object of a namespace of the same name created
    since is asked about again."""
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    asked: list[str] = []
    real_get = kube.get

    def counted_get(path: str, **params):
        asked.append(path)
        return real_get(path, **params)

    kube.get = counted_get  # type: ignore[method-assign]  # counts; the server answers
    name = f"t-again-{secrets.token_hex(3)}"
    holder = f"/api/v1/namespaces/{name}/configmaps/hold"
    create_namespace(cluster, name)
    try:
        made = cluster.api.create(
            f"/api/v1/namespaces/{name}/configmaps",
            {"metadata": {"name": "hold", "finalizers": [HOLD]}, "data": {}},
        )["metadata"]["creationTimestamp"]
        assert not reads.namespace_ending(kube, name, created=made) and len(asked) == 1
        # Timestamps have whole seconds: an object of the second the deletion began might
        # be of a namespace created anew in that second, and is asked about.
        wait_for(lambda: utc_now_text() > made, 2, describe="the next second")
        cluster.api.delete(f"/api/v1/namespaces/{name}")
        assert reads.namespace_ending(kube, name, created=made) and len(asked) == 2
        for _ in range(50):  # 200 runs and their ScheduledJobs ask about one namespace
            assert reads.namespace_ending(kube, name, created=made)
        assert len(asked) == 2, "answered from memory"
        assert reads.namespace_ending(kube, name, created=None) and len(asked) == 3

        cluster.api.patch(holder, {"metadata": {"finalizers": None}})
        wait_for(lambda: namespace_gone(cluster, name), 60, describe=f"{name} gone")
        create_namespace(cluster, name)
        anew = cluster.api.create(
            f"/api/v1/namespaces/{name}/configmaps", {"metadata": {"name": "new"}, "data": {}}
        )["metadata"]["creationTimestamp"]
        assert not reads.namespace_ending(kube, name, created=anew), "a new namespace, alive"
        assert len(asked) == 4
    finally:
        delete_namespace(cluster, name)
        with contextlib.suppress(ApiError):
            cluster.api.patch(holder, {"metadata": {"finalizers": None}})


def utc_now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
