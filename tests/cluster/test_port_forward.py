"""The docs' ``kubectl port-forward`` commands, run as written against the chart.

docs/monitoring.md and docs/ui.md tell an operator to reach the metrics, ``/healthz`` and
the UI's sign-in page through ``kubectl port-forward``; the kubelet's streaming server then
connects to the pod's loopback, so the chart must bind them on every address of the pod
(issue 26: bound to the pod IP, the forward failed with "failed to connect to
localhost:9090 inside namespace"). The commands and the URLs are read from the docs, so a
doc that drifts from the chart breaks this test. One liberty: each forwarded port gets a
free local port (``8090`` becomes ``LOCAL:8090``), so a busy port on this machine cannot fail
the test; the remote side is exactly what the docs say.

The release is installed as the docs name it (release ``pgsched`` in ``pgsched-system``),
with one operator pod running main's image on the real node.
"""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devenv import commands
from devenv.controlplane import ControlPlane
from devenv.postgres import PostgresServer
from devenv.waiting import wait_for
from pgsched.db import connection

# Alone on the cluster: a release named as the docs write it, with its cluster-wide policies.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pgsched"
DOCS = ("docs/monitoring.md", "docs/ui.md")
NAMESPACE = "pgsched-system"  # as the docs write it
SHELL_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
LOCAL_URL = re.compile(r"\bhttp://127\.0\.0\.1:(\d+)(/[^\s>`)\"']*)")


def forward_commands(doc: str) -> list[list[str]]:
    """The distinct ``kubectl … port-forward …`` command lines of the doc's sh blocks."""
    found: list[list[str]] = []
    for block in SHELL_BLOCK.findall((ROOT / doc).read_text()):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["kubectl"] and "port-forward" in words and words not in found:
                found.append(words)
    return found


def local_urls(doc: str) -> list[tuple[int, str]]:
    """Every ``http://127.0.0.1:PORT/PATH`` the doc asks a reader to open or curl."""
    text = (ROOT / doc).read_text()
    return sorted({(int(port), path) for port, path in LOCAL_URL.findall(text)})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def release(
    cluster: ControlPlane,
    crd: None,
    postgres: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControlPlane]:
    database = "pgsched_port_forward"
    with connection.connect(postgres.dsn()) as admin:
        # Empty: the operator pods (main's image) migrate it to their own release, which
        # may be older than this checkout's migrations.
        admin.execute(f"CREATE DATABASE {database}")
    cluster.api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    values = {
        "watchNamespaces": [NAMESPACE],
        "allowReleaseNamespace": True,
        "database": {"dsn": cluster.in_cluster_dsn(postgres.dsn(database))},
        "crds": {"install": False},
        "replicaCount": 1,
        "podDisruptionBudget": {"enabled": False},
        "admissionWebhook": {"enabled": False},
        "ui": {"enabled": True},
    }
    values_file = tmp_path_factory.mktemp("port-forward") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    try:
        cluster.helm("install", "pgsched", CHART, "-n", NAMESPACE, "-f", values_file)
        wait_for(
            lambda: operator_ready(cluster),
            180,
            describe=lambda: cluster.kubectl(
                "describe", "pods", "-n", NAMESPACE, check=False
            ).stdout[-4000:],
        )
        yield cluster
    finally:
        cluster.helm("uninstall", "pgsched", "-n", NAMESPACE, "--wait", check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def operator_ready(cluster: ControlPlane) -> bool:
    pods = cluster.api.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        labelSelector="app.kubernetes.io/component=operator",
    )["items"]
    return bool(pods) and all(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod["status"].get("conditions", [])
        )
        for pod in pods
    )


class Forward:
    """A docs command running in the background; ``local`` maps each remote port to ours."""

    def __init__(self, cluster: ControlPlane, words: list[str]) -> None:
        self.local: dict[int, int] = {}
        argv: list[str] = [str(cluster.binaries.kubectl)]
        for word in words[1:]:
            if word.isdigit():
                self.local[int(word)] = free_port()
                word = f"{self.local[int(word)]}:{word}"
            argv.append(word)
        self.command = " ".join(words)
        self.process = subprocess.Popen(
            argv,
            env=commands.environment(cluster.kubeconfig),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self) -> str:
        """Stop it; its whole output (kubectl prints each failed connection)."""
        self.process.terminate()
        output, _ = self.process.communicate(timeout=10)
        return output


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def reached(status: int, body: str, path: str) -> bool:
    """What a reader sees at ``path``: metrics, a healthy /healthz, or the UI's sign-in."""
    if path == "/metrics":
        return status == 200 and "pgsched_tick_leader" in body
    if path == "/healthz":
        return status == 200
    return "action='/login'" in body  # the UI's sign-in form, for every page before sign-in


def wait_until_reached(forward: Forward, port: int, path: str) -> None:
    url = f"http://127.0.0.1:{forward.local[port]}{path}"
    seen: list[tuple[int, str]] = []

    def answered() -> bool:
        try:
            seen.append(get(url))
        except OSError as error:  # the forward not listening yet, or the pod refused
            seen.append((0, str(error)))
            return False
        return reached(*seen[-1], path)

    wait_for(answered, 60, describe=lambda: f"`{forward.command}`, then {path}: {seen[-1:]}")


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_port_forward_commands_reach_the_operator_as_written(release, doc):
    found = forward_commands(doc)
    urls = local_urls(doc)
    assert found, f"{doc} shows no kubectl port-forward command"
    wanted = {"/metrics", "/healthz"} if doc.endswith("monitoring.md") else {"/"}
    assert wanted <= {path for _, path in urls}, f"{doc} shows no URL for one of {wanted}"

    for words in found:
        forward = Forward(release, words)
        try:
            for port, path in urls:
                if port in forward.local:
                    wait_until_reached(forward, port, path)
        finally:
            output = forward.stop()
        assert "error" not in output.lower(), f"`{forward.command}` said:\n{output}"
