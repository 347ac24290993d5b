"""pytest fixtures for tests against the local Kubernetes control plane (marker ``cluster``).

- ``cluster`` (session): a running ``devenv.controlplane.ControlPlane`` with its real node
  ``node-1`` (kubelet + containerd). Its ``kubeconfig`` is the admin kubeconfig path; ``api``
  is an admin HTTP client; ``kubectl(...)``/``helm(...)`` run the real CLIs; ``pod_logs(...)``
  is ``kubectl logs``; ``restart_apiserver()`` injects an API server restart;
  ``stop_node()``/``start_node()`` kill and revive the node; ``in_cluster_dsn(dsn)`` is how
  pods reach a Postgres on the host.
- Tests that start a cluster with the node of their own are marked ``own_cluster`` and run
  first; tests that start an API server of their own without the node are ``api_only``;
  tests that need the session's cluster to themselves (they restart the API server or the
  node, install cluster-wide admission, or measure latency) are ``exclusive``.
- ``hack/test.sh`` runs the ``exclusive`` and ``own_cluster`` tests alone on the node, then
  the ``cluster`` and ``api_only`` ones in parallel workers that attach to one shared
  cluster (``PGSCHED_SHARED_CLUSTER``); run directly, pytest starts the session's cluster
  itself.
- ``namespace`` (per test): a fresh namespace whose ``default`` ServiceAccount exists,
  deleted afterwards (which also stops its pods).
- ``kubectl`` / ``helm`` (session): ``kubectl("get", "pods", "-n", ns)`` → CompletedProcess;
  raises ``CommandError`` on a non-zero exit unless ``check=False``.

Waiting: ``from devenv.waiting import wait_for``.

When the binaries are missing the cluster tests are skipped with the fix in the message —
unless ``PGSCHED_REQUIRE_CLUSTER`` is set (CI sets it), in which case they fail. Set
``PGSCHED_KEEP_CLUSTER=1`` to keep the work directory (component logs) after the run.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from devenv import kubeconfig
from devenv.adminclient import ApiError
from devenv.binaries import REPO_ROOT, Binaries, MissingBinariesError, image_index
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.k8s.client import api

Command = Callable[..., subprocess.CompletedProcess[str]]


@contextmanager
def host_only_cluster(*namespaces: str) -> Iterator[ControlPlane]:
    """A control plane without the node (for tests of the API alone: watches, requests,
    an operator fleet's memory), with pgsched's CRDs and these namespaces."""
    with ControlPlane(binaries=require_binaries(), host_only=True) as control_plane:
        control_plane.apply_crds(REPO_ROOT / "crds")
        for namespace in namespaces:
            control_plane.kubectl("create", "namespace", namespace)
        yield control_plane


def require_binaries() -> Binaries:
    """The control plane's executables, or skip (fail under PGSCHED_REQUIRE_CLUSTER)."""
    try:
        binaries = Binaries.locate()
        if not image_index().is_file():
            raise MissingBinariesError(
                f"no local images ({image_index()} is missing): build them with `make images`"
            )
        return binaries
    except MissingBinariesError as error:
        missing(error, "local control plane")


def missing(error: MissingBinariesError, what: str) -> NoReturn:
    """Skip the test for want of ``what`` — or fail it, under PGSCHED_REQUIRE_CLUSTER."""
    if os.environ.get("PGSCHED_REQUIRE_CLUSTER"):
        pytest.fail(f"{error} — PGSCHED_REQUIRE_CLUSTER is set, so this is an error")
    pytest.skip(f"{what} unavailable: {error}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start a cluster of their own (``own_cluster``) run first: there is one real
    node per machine, so they could not start while the session's ``cluster`` is up. A test
    whose markers would put it in two of hack/test.sh's runs, or none, is an error."""
    for item in items:
        marked = {name for name in MARKERS if item.get_closest_marker(name)}
        if "exclusive" in marked and "cluster" not in marked:
            raise pytest.UsageError(
                f"{item.nodeid}: `exclusive` means the session's cluster to itself: mark it"
                " `cluster` too"
            )
        if "api_only" in marked and marked & {"cluster", "own_cluster"}:
            raise pytest.UsageError(
                f"{item.nodeid}: `api_only` (an API server of its own, without the node) does"
                f" not go with {sorted(marked & {'cluster', 'own_cluster'})}"
            )
    items.sort(key=lambda item: item.get_closest_marker("own_cluster") is None)


MARKERS = ("cluster", "own_cluster", "api_only", "exclusive")


# Set by hack/test.sh for its parallel phase: the state file of the one cluster (with the
# machine's one node) that every pytest-xdist worker of that phase attaches to.
SHARED_CLUSTER = "PGSCHED_SHARED_CLUSTER"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that needs the cluster to itself never runs on the shared one."""
    if os.environ.get(SHARED_CLUSTER) and (
        item.get_closest_marker("exclusive") or item.get_closest_marker("own_cluster")
    ):
        pytest.fail(
            f"{item.nodeid} needs the machine's cluster to itself (marker exclusive or"
            " own_cluster) and cannot run beside the tests sharing it: select it with"
            " -m 'exclusive or own_cluster', as hack/test.sh's serial phase does"
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    binaries = require_binaries()
    shared = os.environ.get(SHARED_CLUSTER)
    if shared:
        attached = ControlPlane.attach(Path(shared), binaries=binaries)
        try:
            yield attached
        finally:
            attached.stop()
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            "parallel workers share one cluster (there is one real node per machine): run"
            " them through hack/test.sh, or start one with `python -m devenv.controlplane up"
            f" --state-file FILE` and set {SHARED_CLUSTER}=FILE"
        )
    keep = bool(os.environ.get("PGSCHED_KEEP_CLUSTER"))
    with ControlPlane(binaries=binaries, keep_work_dir=keep) as control_plane:
        control_plane.add_node("node-1")
        yield control_plane
        if keep:
            print(f"\ncontrol plane work dir kept: {control_plane.work_dir}")


def create_namespace(cluster: ControlPlane, name: str) -> None:
    cluster.api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    # Pods are only admitted once the ServiceAccount controller created `default`.
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
        describe=f"ServiceAccount {name}/default",
    )


def delete_namespace(cluster: ControlPlane, name: str) -> None:
    """Delete ``name`` without waiting; gone already is fine (a test may delete it)."""
    try:
        cluster.api.delete(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status != 404:
            raise


def namespace_gone(cluster: ControlPlane, name: str) -> bool:
    try:
        cluster.api.get(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status == 404:
            return True
        raise
    return False


def client_as(cluster: ControlPlane, namespace: str, account: str, folder: Path) -> api.KubeApi:
    """An API client authenticated as ServiceAccount ``namespace/account`` (an hour's
    token; its kubeconfig in ``folder``), as a pod of that account is."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h"
    ).stdout.strip()
    path = kubeconfig.write(
        folder / "kubeconfig",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user=f"system:serviceaccount:{namespace}:{account}",
        token=token,
    )
    return api.KubeApi.from_environment(kubeconfig=str(path))


@pytest.fixture
def namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    name = f"t-{slug[:48].strip('-')}-{secrets.token_hex(3)}"
    create_namespace(cluster, name)
    yield name
    delete_namespace(cluster, name)


@pytest.fixture(scope="session")
def kubectl(cluster: ControlPlane) -> Command:
    return cluster.kubectl


@pytest.fixture(scope="session")
def helm(cluster: ControlPlane) -> Command:
    return cluster.helm


# -- manifest builders shared by cluster tests -----------------------------------------------


def container(name: str, image: str, *command: str, **fields: object) -> dict[str, object]:
    """A container that runs ``command`` (fields in Kubernetes spelling, e.g. ``env=[...]``)."""
    return {"name": name, "image": image, "command": list(command), **fields}


def pod_manifest(
    name: str,
    *containers: dict[str, object],
    restart_policy: str = "Never",
    **spec: object,
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": restart_policy, "containers": list(containers), **spec},
    }


def job_manifest(name: str, *containers: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": list(containers)}},
        },
    }
