"""The API server is the real one: CRD schemas, printer columns, RBAC, Pod Security, helm."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devenv.adminclient import ApiError, namespaced
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from plugins.cluster import container, pod_manifest

pytestmark = pytest.mark.cluster

TINY_CHART = Path(__file__).parent / "charts" / "tiny"

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.harness.pgsched.dev"},
    "spec": {
        "group": "harness.pgsched.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                },
                            }
                        },
                    }
                },
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                ],
            }
        ],
    },
}


def widget(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "harness.pgsched.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def widget_crd(cluster: ControlPlane) -> Iterator[None]:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.harness.pgsched.dev", "--timeout=30s"
    )
    yield
    cluster.kubectl("delete", "crd", "widgets.harness.pgsched.dev", "--wait=false")


def test_crd_structural_schema_rejects_an_invalid_object_server_side(
    cluster: ControlPlane, namespace: str, widget_crd: None
) -> None:
    path = namespaced("widgets", namespace, api_version="harness.pgsched.dev/v1")

    with pytest.raises(ApiError) as rejected:
        cluster.api.create(path, widget("bad", size=42, color="green"))

    assert rejected.value.status == 422
    assert "spec.size: Invalid value: 42" in rejected.value.message
    assert 'spec.color: Unsupported value: "green"' in rejected.value.message
    cluster.api.create(path, widget("good", size=3, color="blue"))


def test_kubectl_get_shows_the_crd_printer_columns(
    cluster: ControlPlane, namespace: str, widget_crd: None
) -> None:
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(widget("w1", size=7, color="red"))
    )

    table = cluster.kubectl("get", "widgets", "-n", namespace).stdout.splitlines()

    assert table[0].split() == ["NAME", "SIZE", "COLOR"]
    assert table[1].split() == ["w1", "7", "red"]


def test_service_account_is_denied_without_rbac_and_allowed_with_a_role(
    cluster: ControlPlane, namespace: str
) -> None:
    for account in ("nobody", "reader"):
        cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.kubectl(
        "create",
        "role",
        "read-configmaps",
        "-n",
        namespace,
        "--verb=get,list",
        "--resource=configmaps",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "reader",
        "-n",
        namespace,
        "--role=read-configmaps",
        f"--serviceaccount={namespace}:reader",
    )
    # The Python client in the pgsched image, logging in the way the operator does: the in-cluster
    # config (the projected token, the `kubernetes` Service through kube-proxy).
    script = (
        "import kubernetes as k\n"
        "k.config.load_incluster_config()\n"
        "api = k.client.CoreV1Api()\n"
        f"print([c.metadata.name for c in api.list_namespaced_config_map('{namespace}').items])\n"
        f"api.list_namespaced_secret('{namespace}')\n"
    )
    as_nobody = container("main", "ghcr.io/pgsched/pgsched:dev", "python", "-c", script)
    as_reader = container("main", "ghcr.io/pgsched/pgsched:dev", "python", "-c", script)
    api = cluster.api
    api.create(
        namespaced("pods", namespace),
        pod_manifest("nobody", as_nobody, serviceAccountName="nobody"),
    )
    api.create(
        namespaced("pods", namespace),
        pod_manifest("reader", as_reader, serviceAccountName="reader"),
    )

    def finished(name: str) -> str | None:
        phase = api.get(namespaced("pods", namespace, name)).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    for name in ("nobody", "reader"):
        wait_for(functools.partial(finished, name), 60, describe=f"pod {name} to finish")

    nobody_log = cluster.pod_logs(namespace, "nobody")
    assert finished("nobody") == "Failed"
    assert (
        f'User \\"system:serviceaccount:{namespace}:nobody\\" cannot list resource \\"configmaps\\"'
        in nobody_log
    ), nobody_log
    reader_log = cluster.pod_logs(namespace, "reader")
    assert "'kube-root-ca.crt'" in reader_log  # the Role allowed listing ConfigMaps...
    assert 'cannot list resource \\"secrets\\"' in reader_log  # ...and nothing else
    assert finished("reader") == "Failed"


def test_restricted_namespace_rejects_a_privileged_pod(
    cluster: ControlPlane, namespace: str
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    privileged = pod_manifest(
        "privileged",
        container("main", "busybox:1.36", "sleep", "60", securityContext={"privileged": True}),
    )

    result = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(privileged), check=False
    )

    assert result.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in result.stderr
    assert "privileged" in result.stderr
    compliant = pod_manifest(
        "compliant",
        container(
            "main",
            "busybox:1.36",
            "sleep",
            "60",
            securityContext={
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        ),
    )
    cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(compliant)
    )


def test_helm_installs_and_uninstalls_a_chart(cluster: ControlPlane, namespace: str) -> None:
    cluster.helm("install", "tiny", TINY_CHART, "-n", namespace, "--wait", "--timeout=60s")

    deployment = yaml.safe_load(
        cluster.kubectl("get", "deployment", "tiny", "-n", namespace, "-o", "yaml").stdout
    )
    assert deployment["status"]["readyReplicas"] == 1
    releases = json.loads(cluster.helm("list", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("tiny", "deployed")]

    cluster.helm("uninstall", "tiny", "-n", namespace, "--wait", "--timeout=60s")

    def leftovers() -> str:
        return cluster.kubectl(
            "get",
            "deployment,configmap,pods",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/name=tiny",
            "-o",
            "name",
        ).stdout

    wait_for(lambda: leftovers() == "", 60, describe=lambda: f"chart objects gone: {leftovers()!r}")
    assert json.loads(cluster.helm("list", "-n", namespace, "-o", "json").stdout) == []
