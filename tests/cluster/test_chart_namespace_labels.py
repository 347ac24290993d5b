"""The chart's default, namespaces served by a label, against the real API server: its
admission policies as the API server evaluates them (CEL over the request's Namespace).

- ``kubectl apply`` of a ScheduledJob in a namespace no release serves prints a warning
  naming the label to add (the object is still created: a warning, not a refusal);
- the operator's ServiceAccount, whose rules are a ClusterRole in this mode, may create Jobs
  and Secrets only in a namespace that carries the label — never in an unlabelled one, nor
  in the release namespace — and may list and watch the labelled Namespaces.

The release is installed with the chart's values but its label key (each run of this module
its own, so nothing else on the cluster is selected) and without operator pods
(``replicaCount: 0``; the operator under test runs as a process elsewhere).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.k8s import names
from pgsched.k8s.client import api
from plugins.cluster import client_as, create_namespace
from plugins.operator import busybox

# Alone on the cluster: the release's admission policies are cluster-wide.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

CHART = Path(__file__).resolve().parents[2] / "charts" / "pgsched"


@dataclass(frozen=True)
class Release:
    name: str
    home: str
    label: str  # key=value
    served: str  # a namespace with the label
    unserved: str  # one without

    @property
    def account(self) -> str:
        return f"{self.name}-pgsched"


@pytest.fixture(scope="module")
def release(
    cluster: ControlPlane, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    suffix = secrets.token_hex(3)
    key = f"pgsched.dev/serve-{suffix}"
    found = Release(
        name=f"labels{suffix}",
        home=f"labels-home-{suffix}",
        label=f"{key}=true",
        served=f"labels-served-{suffix}",
        unserved=f"labels-unserved-{suffix}",
    )
    for namespace in (found.home, found.served, found.unserved):
        create_namespace(cluster, namespace)
    cluster.api.patch(f"/api/v1/namespaces/{found.served}", {"metadata": {"labels": {key: "true"}}})
    values = {
        "namespaceLabels": f"{key}=true",
        "database": {"dsn": "host=db.invalid user=pgsched dbname=pgsched"},
        "crds": {"install": False},
        "replicaCount": 0,
        "podDisruptionBudget": {"enabled": False},
    }
    values_file = tmp_path_factory.mktemp("labels") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    installed = cluster.helm("install", found.name, CHART, "-n", found.home, "-f", values_file)
    # What to do next, as helm prints it (NOTES.txt).
    assert f"every namespace labelled {found.label}" in installed.stdout
    assert f"kubectl label namespace <namespace> {found.label}" in installed.stdout
    # The API server's policy cache picks new bindings up within a second or so.
    wait_for(
        lambda: "is not served by pgsched" in applied(cluster, found.unserved, probe_name()),
        30,
        describe="the unserved-namespace warning to be in force",
    )
    yield found
    cluster.helm("uninstall", found.name, "-n", found.home, "--wait", check=False)
    for namespace in (found.home, found.served, found.unserved):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def probe_name() -> str:
    return f"probe-{secrets.token_hex(3)}"


def applied(cluster: ControlPlane, namespace: str, name: str) -> str:
    """``kubectl apply`` of a plain ScheduledJob (it must succeed); what kubectl printed
    on stderr (warnings)."""
    manifest = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")},
    }
    result = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    return str(result.stderr)


def test_applying_a_scheduledjob_where_nobody_serves_warns_naming_the_label(cluster, release):
    warning = applied(cluster, release.unserved, "nightly")

    assert f"Warning: Validation failed for ValidatingAdmissionPolicy '{release.account}-" in (
        warning
    )
    assert f"namespace {release.unserved} is not served by pgsched" in warning
    assert f"release {release.name} serves namespaces labelled {release.label}" in warning
    assert f"kubectl label namespace {release.unserved} {release.label}" in warning
    # A warning, not a refusal: the object is there for when the namespace is labelled.
    cluster.api.get(api.scheduled_job_path(release.unserved, "nightly"))
    assert "Warning" not in applied(cluster, release.served, "nightly")


@pytest.fixture(scope="module")
def as_operator(
    cluster: ControlPlane, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> api.KubeApi:
    """An API client authenticated as the release's ServiceAccount, as the operator is."""
    return client_as(cluster, release.home, release.account, tmp_path_factory.mktemp("operator"))


def lease_secret(run_id: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"nightly-{run_id}-lease",
            "labels": {names.LABEL_RUN_ID: str(run_id)},
        },
        "stringData": {"token": "t"},
    }


def suspended_job(name: str) -> dict[str, Any]:
    """A Job that makes no pod (suspended): what is checked is its creation alone."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"suspend": True, **busybox("true", restartPolicy="Never")["spec"]},
    }


def test_the_operator_creates_jobs_and_secrets_only_in_labelled_namespaces(release, as_operator):
    def create(namespace: str, plural: str, body: dict[str, Any]) -> None:
        group = "batch" if plural == "jobs" else ""
        as_operator.create(api.path_of(group=group, namespace=namespace, plural=plural), body)

    create(release.served, "secrets", lease_secret(1))
    create(release.served, "jobs", suspended_job("nightly-1"))
    for namespace in (release.unserved, release.home):
        for plural, body in (("secrets", lease_secret(2)), ("jobs", suspended_job("nightly-2"))):
            with pytest.raises(api.ApiError) as refused:
                create(namespace, plural, body)
            assert refused.value.status == 403, refused.value
            assert (
                "the pgsched operator creates Jobs and Secrets only in the namespaces its"
                f" release serves (labelled {release.label}); namespace {namespace} is not"
                " one of them"
            ) in refused.value.message


def test_the_operator_may_list_the_labelled_namespaces(release, as_operator):
    listed = as_operator.get("/api/v1/namespaces", labelSelector=release.label)
    assert [item["metadata"]["name"] for item in listed["items"]] == [release.served]
