"""The parallel phase of ``make test`` shares one cluster between pytest-xdist workers
(``hack/test.sh``): a worker attaches to it from a state file, draws ports no other worker
draws, and is refused what would change the cluster under the others' tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devenv import pki, processes
from devenv.binaries import Binaries
from devenv.controlplane import NODE_IP, SERVICE_IP, ControlPlane, SharedClusterError


def test_each_worker_draws_ports_no_other_worker_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_PORT_SHARE", raising=False)  # one phase: make test's are 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    drawn: dict[int, set[int]] = {}
    for worker in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        drawn[worker] = {processes.free_port() for _ in range(40)}
        assert all(port % 3 == worker for port in drawn[worker]), drawn[worker]
    assert not drawn[0] & drawn[1] and not drawn[1] & drawn[2] and not drawn[0] & drawn[2]


def test_outside_a_worker_every_port_may_be_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_PORT_SHARE", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert {processes.free_port() % 3 for _ in range(60)} == {0, 1, 2}


@pytest.fixture
def attached(tmp_path: Path) -> ControlPlane:
    """A cluster's state file and certificates, as ``devenv.controlplane up`` leaves them."""
    keys = pki.create(tmp_path / "pki", service_ip=SERVICE_IP, node_ip=NODE_IP, node_name="node-1")
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"work_dir": str(tmp_path), "apiserver_port": 16443, "etcd_client_port": 12379})
    )
    # Nothing here runs a binary: any paths do, so the test needs no `make k8s`.
    binaries = Binaries(*(tmp_path / name for name in "abcdefghi"))
    plane = ControlPlane.attach(state, binaries=binaries)
    assert plane.ca_file == keys.ca.cert
    return plane


def test_an_attached_worker_reaches_the_same_api_server(attached: ControlPlane) -> None:
    assert attached.server == "https://127.0.0.1:16443"
    assert attached.kubeconfig == attached.work_dir / "admin.kubeconfig"


@pytest.mark.parametrize(
    "change",
    [
        lambda plane: plane.restart_apiserver(),
        lambda plane: plane.stop_apiserver(),
        lambda plane: plane.stop_node(),
        lambda plane: plane.start_node(),
        lambda plane: plane.add_node(),
        lambda plane: plane.start(),
        lambda plane: plane.memory(),
    ],
    ids=[
        "restart_apiserver",
        "stop_apiserver",
        "stop_node",
        "start_node",
        "add_node",
        "start",
        "memory",
    ],
)
def test_an_attached_worker_may_not_change_the_cluster_under_the_others(
    attached: ControlPlane, change
) -> None:
    with pytest.raises(SharedClusterError, match="mark the test `exclusive`"):
        change(attached)


def test_stopping_an_attached_worker_stops_only_what_it_started(attached: ControlPlane) -> None:
    attached.stop()  # no node lock released, no cluster stopped: nothing of its own to stop
    assert attached.work_dir.is_dir()
