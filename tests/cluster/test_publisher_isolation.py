"""A namespace whose Events and status writes the API server refuses (here: it is being
deleted) does not hold up another namespace's: the publisher drops the refused namespace's
changes from the outbox with a warning and publishes the rest. Before, the refusal (403)
rolled the whole batch back, so the same batch was tried again and again and every
namespace's `kubectl get sj` froze until the refusing namespace was gone."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from uuid import UUID

import pytest
import yaml

from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from factories import RecordingLauncher, define
from pgsched.engine import dispatch, runs
from pgsched.k8s.client import api
from pgsched.k8s.reporting.publisher import Publisher
from plugins.cluster import create_namespace
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
        again = publisher.run_once(conn)

    assert calm in result.definitions and list(result.refused) == [terminating]
    assert "403" in result.refused[terminating] and list(again.refused) == [terminating]
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
