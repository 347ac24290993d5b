"""The run API of operator processes on this host, as job pods on the local node reach it.

``operators.start_operator`` gives every replica a port of its own for its run API
(``PGSCHED_RUN_API_BIND=127.0.0.1:<port>``), a certificate and the address its Jobs carry
(``PGSCHED_RUN_API_URL``). Pods cannot reach the host's loopback (the node has a network
namespace of its own), so each replica's port is published the way a Postgres of the host
is (``ControlPlane.expose_postgres``): relays into the node's namespace, behind a
selector-less Service in ``default``, one EndpointSlice per replica with its own port
(``ControlPlane.publish_host_port``). Pods are given ``https://<ClusterIP>:443``.

One Service per installation (the replicas that share a database), not one for the
cluster: the parallel test workers share the cluster, and a pod whose request reached
another test's operator would hear from a database that does not know its run. The
replicas of an installation are those started with the same connection string, so the
Service is named after it.

A replica's endpoint goes when its process ends, however it ends (stopped, killed by a
test or a chaos fault, crashed): the Service never sends pods to a dead replica for longer
than kube-proxy takes to sync, and the client's retry of a refused connection covers that
moment. Keeping dead endpoints would leave a chaos run, which restarts replicas many times,
with a Service whose every other connection is refused.

The certificate is for the Service's ClusterIP (what pods ask for) and 127.0.0.1 (a client
on this host), made once per ClusterIP and kept in the cluster's work directory: every
replica of an installation serves the same one, as the chart's replicas share one Secret.
A host-only cluster runs no pods: each replica is given its own address,
``https://127.0.0.1:<port>``, with a certificate for that.

Operators installed with the Helm chart run as pods and are reached through the chart's
Service; :func:`chart_url` is the address to give them where there is no DNS.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from devenv import pki
from devenv.controlplane import ControlPlane
from devenv.processes import free_port

SERVICE_PORT = 443
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class RunApi:
    """One replica's run API: its port, its certificate, the address its Jobs carry, and
    the Service it is an endpoint of (None on a host-only cluster)."""

    port: int
    cert_dir: Path
    url: str
    service: str | None

    def environment(self) -> dict[str, str]:
        """The operator's settings for it (k8s/serve/settings.py)."""
        return {
            "PGSCHED_RUN_API_BIND": f"{LOOPBACK}:{self.port}",
            "PGSCHED_RUN_API_CERT_DIR": str(self.cert_dir),
            "PGSCHED_RUN_API_URL": self.url,
        }


def publish(cluster: ControlPlane, dsn: str, *, wait: bool = True) -> RunApi:
    """A port for a new replica of the installation on ``dsn``, published to pods
    (``wait``: until pods can reach it, see ``ControlPlane.publish_host_port``)."""
    port = free_port()
    if cluster.host_only:
        return RunApi(port, certificate(cluster, LOOPBACK), f"https://{LOOPBACK}:{port}", None)
    service = service_name(dsn)
    cluster_ip = cluster.publish_host_port(service, port, service_port=SERVICE_PORT, wait=wait)
    return RunApi(
        port, certificate(cluster, cluster_ip), f"https://{cluster_ip}:{SERVICE_PORT}", service
    )


def withdraw(cluster: ControlPlane, run_api: RunApi) -> None:
    """The replica's endpoint removed (its process ended)."""
    if run_api.service is not None:
        cluster.withdraw_host_port(run_api.service, run_api.port)


def service_name(dsn: str) -> str:
    """The Service of the installation on ``dsn`` (a DNS label, whatever the string)."""
    return f"pgsched-run-api-{hashlib.sha256(dsn.encode()).hexdigest()[:10]}"


def certificate(cluster: ControlPlane, ip: str) -> Path:
    """The folder of the run API's certificate for ``ip`` (and the loopback), made the
    first time it is asked for. Made beside it and renamed into place, so a replica never
    reads a half-written one, and two processes making it at once keep one."""
    folder = cluster.work_dir / "run-api" / ip
    if folder.is_dir():
        return folder
    making = folder.with_name(f"{ip}.making-{os.getpid()}")
    pki.serving_tls(making, ips=list(dict.fromkeys([ip, LOOPBACK])), ca_name="pgsched-run-api-ca")
    try:
        making.rename(folder)
    except OSError:  # another process made it first
        shutil.rmtree(making, ignore_errors=True)
    return folder


def chart_url(cluster: ControlPlane, *, release: str, namespace: str) -> str:
    """The run API's address for the chart's operator pods on the local cluster (``make
    demo``, the chart tests), to give as ``runApi.url``.

    The local cluster has no DNS, so pods cannot resolve the chart's own address,
    ``https://<fullname>-run-api.<namespace>.svc``; they need an IP, and the chart's
    certificate must name it. The chart's Service gets its ClusterIP only when it is
    installed, too late for that: this Service, made before the install, selects the same
    pods and port and has its ClusterIP at once. Its selector is the chart's (release
    ``release``, default names)."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{release}-run-api-by-ip", "namespace": namespace},
        "spec": {
            "selector": {
                "app.kubernetes.io/name": "pgsched",
                "app.kubernetes.io/instance": release,
                "app.kubernetes.io/component": "operator",
            },
            "ports": [{"name": "run-api", "port": SERVICE_PORT, "targetPort": "run-api"}],
        },
    }
    created = cluster.api.create(f"/api/v1/namespaces/{namespace}/services", service)
    return f"https://{created['spec']['clusterIP']}"
