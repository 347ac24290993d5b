"""How operator processes on this host are given their run API (``devenv.run_api``): a port,
a certificate for the address pods use, that address, and an endpoint that lasts as long as
the process. What pods then reach through the relays is tests/cluster's to prove."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from devenv import run_api
from devenv.binaries import Binaries
from devenv.controlplane import ControlPlane
from devenv.operators import start_operator
from devenv.waiting import wait_for
from pgsched.k8s.serve.settings import OperatorSettings

CLUSTER_IP = "10.96.7.7"
DSN = "host=127.0.0.1 port=1 dbname=nowhere user=postgres connect_timeout=1"


class Published:
    """What the control plane was asked to publish and withdraw (no cluster runs here)."""

    def __init__(self) -> None:
        self.live: set[tuple[str, int]] = set()
        self.withdrawn = threading.Event()

    def publish_host_port(
        self, service: str, port: int, *, service_port: int, wait: bool = True
    ) -> str:
        assert service_port == 443
        self.live.add((service, port))
        return CLUSTER_IP

    def withdraw_host_port(self, service: str, port: int) -> None:
        self.live.discard((service, port))
        self.withdrawn.set()


def control_plane(tmp_path: Path, *, host_only: bool) -> ControlPlane:
    """A control plane that is never started: nothing here runs a binary of it."""
    binaries = Binaries(*(tmp_path / name for name in "abcdefghi"))
    return ControlPlane(work_dir=tmp_path / "cluster", binaries=binaries, host_only=host_only)


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ControlPlane, Published]:
    plane, seen = control_plane(tmp_path, host_only=False), Published()
    monkeypatch.setattr(plane, "publish_host_port", seen.publish_host_port)
    monkeypatch.setattr(plane, "withdraw_host_port", seen.withdraw_host_port)
    return plane, seen


def serve_once(cert_dir: Path, port: int) -> threading.Thread:
    """A TLS server with the folder's pair on 127.0.0.1:port, for one handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    listener = socket.create_server(("127.0.0.1", port))

    def accept() -> None:
        with listener, context.wrap_socket(listener.accept()[0], server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return thread


def handshake(ca_pem: str, port: int, hostname: str) -> None:
    """What a pod's client does: trust the CA it was given, and nothing else."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=ca_pem)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=hostname) as tls,
    ):
        tls.sendall(b".")


def test_replicas_of_one_installation_share_a_service_and_a_certificate_for_its_address(
    published: tuple[ControlPlane, Published],
) -> None:
    plane, seen = published
    first, second = run_api.publish(plane, DSN), run_api.publish(plane, DSN)
    other = run_api.publish(plane, DSN.replace("nowhere", "elsewhere"))

    assert first.url == second.url == f"https://{CLUSTER_IP}:443"
    assert first.service == second.service != other.service
    assert first.port != second.port
    assert seen.live == {(first.service, first.port), (second.service, second.port)} | {
        (other.service, other.port)
    }
    assert first.cert_dir == second.cert_dir  # as the chart's replicas share one Secret
    # The operator accepts what it is given, and hands its Jobs the CA that signed it.
    settings = OperatorSettings.from_environment(
        {"PGSCHED_DSN": DSN, "PGSCHED_NAMESPACES": "jobs", "PGSCHED_IMAGE": "pgsched:dev"}
        | first.environment()
    )
    assert settings.run_api.bind == f"127.0.0.1:{first.port}"
    assert settings.jobs.run_api_url == first.url
    assert settings.jobs.run_api_ca == (first.cert_dir / "ca.crt").read_text()
    # Pods ask for the ClusterIP; a client on this host may ask for the loopback.
    for hostname in (CLUSTER_IP, "127.0.0.1"):
        server = serve_once(first.cert_dir, first.port)
        handshake(settings.jobs.run_api_ca, first.port, hostname)
        server.join(timeout=10)


def test_the_service_name_is_a_dns_label_whatever_the_connection_string() -> None:
    name = run_api.service_name("host=a,b port=5432,5433 target_session_attrs=read-write")
    assert name.startswith("pgsched-run-api-") and len(name) <= 63
    assert name.replace("-", "").isalnum() and name == name.lower()


def test_a_host_only_replica_is_given_its_own_address(tmp_path: Path) -> None:
    """No pod runs on a host-only cluster: nothing is published, the address is the
    replica's own."""
    plane = control_plane(tmp_path, host_only=True)
    given = run_api.publish(plane, DSN)
    assert given.service is None
    assert given.url == f"https://127.0.0.1:{given.port}"
    server = serve_once(given.cert_dir, given.port)
    handshake((given.cert_dir / "ca.crt").read_text(), given.port, "127.0.0.1")
    server.join(timeout=10)


def test_a_replicas_endpoint_goes_when_its_process_ends_however_it_ends(
    published: tuple[ControlPlane, Published], tmp_path: Path
) -> None:
    """This replica ends on its own (no database answers it): nobody stops it, and its
    endpoint goes all the same, as after a kill -9 by a chaos fault."""
    plane, seen = published
    replica = start_operator(
        plane, dsn=DSN, namespaces="jobs", log_path=tmp_path / "operator.log", wait=False
    )
    assert seen.live == {(replica.run_api.service, replica.run_api.port)}

    wait_for(seen.withdrawn.is_set, 60, describe=lambda: f"the withdrawal; log:\n{replica.log()}")

    assert seen.live == set()
    # It took its settings, the run API's included, and stopped at the database.
    assert "cannot start: database" in replica.log(), replica.log()
