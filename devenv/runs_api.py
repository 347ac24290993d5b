"""The Run API of an operator on this host, registered with a host-only control plane's
aggregation layer, as the Helm chart registers the operator's pods.

An APIService names a Service, never an address, and the API server (with
``--enable-aggregator-routing``) connects to that Service's endpoints. A host process
can be an endpoint only by an address the API server may be given: Kubernetes refuses
loopback endpoints, so the operator listens on this host's own address (the first
non-loopback IPv4, reachable from the host-only API server, which runs here too).

Both an Endpoints object and an EndpointSlice are written: which of the two the
aggregator's resolver reads is the API server version's business, not the test's.

The serving certificate is for ``<service>.default.svc``, the name the aggregator checks,
and its CA is the APIService's ``caBundle``.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devenv import pki
from devenv.adminclient import ApiError
from devenv.controlplane import ControlPlane
from devenv.processes import free_port

SERVICE = "pgsched-runs-api"
NAMESPACE = "default"
GROUP = "runs.pgsched.dev"
VERSION = "v1alpha1"
APISERVICE = f"{VERSION}.{GROUP}"


@dataclass(frozen=True)
class RunsApi:
    address: str
    port: int
    cert_dir: Path

    def environment(self) -> dict[str, str]:
        """The operator's settings for it (k8s/serve/settings.py)."""
        return {
            "PGSCHED_RUNS_API_BIND": f"{self.address}:{self.port}",
            "PGSCHED_RUNS_API_CERT_DIR": str(self.cert_dir),
            # Tests revoke access and look again: no stale answers for long.
            "PGSCHED_RUNS_API_ACCESS_TTL_SECONDS": "1",
        }

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"


def host_address() -> str:
    """This host's first non-loopback IPv4 address."""
    listed = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in listed.splitlines():
        fields = line.split()
        address = fields[fields.index("inet") + 1].partition("/")[0]
        if not address.startswith("127."):
            return address
    raise RuntimeError(
        "this host has no non-loopback IPv4 address: an APIService's endpoint cannot be"
        f" on loopback (ip -4 -o addr said: {listed!r})"
    )


def register(cluster: ControlPlane, directory: Path) -> RunsApi:
    """A port and certificate for the operator's Run API, and the Service, endpoints and
    APIService that send ``runs.pgsched.dev`` requests there."""
    if not cluster.host_only:
        raise ValueError("devenv.runs_api registers host processes with host-only clusters")
    address, port = host_address(), free_port()
    cert_dir = pki.serving_tls(
        directory,
        ips=[address],
        ca_name="pgsched-runs-api-ca",
        names=[f"{SERVICE}.{NAMESPACE}.svc"],
    )
    _replace(
        cluster,
        f"/api/v1/namespaces/{NAMESPACE}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE},
            "spec": {"ports": [{"port": 443, "targetPort": port}]},
        },
    )
    _replace(
        cluster,
        f"/api/v1/namespaces/{NAMESPACE}/endpoints",
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": SERVICE},
            "subsets": [{"addresses": [{"ip": address}], "ports": [{"port": port}]}],
        },
    )
    _replace(
        cluster,
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": SERVICE,
                "labels": {
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "pgsched-tests",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        },
    )
    _replace(
        cluster,
        "/apis/apiregistration.k8s.io/v1/apiservices",
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {"namespace": NAMESPACE, "name": SERVICE, "port": 443},
                "caBundle": base64.b64encode((cert_dir / "ca.crt").read_bytes()).decode(),
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
            },
        },
    )
    return RunsApi(address, port, cert_dir)


def unregister(cluster: ControlPlane) -> None:
    """Remove the APIService first: an APIService whose server is gone breaks discovery
    for every client of the cluster (and blocks namespace deletion)."""
    for path in (
        f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}",
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{SERVICE}",
        f"/api/v1/namespaces/{NAMESPACE}/endpoints/{SERVICE}",
        f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}",
    ):
        try:
            cluster.api.delete(path)
        except ApiError as error:
            if error.status != 404:
                raise


def _replace(cluster: ControlPlane, collection: str, body: dict[str, Any]) -> None:
    """Create ``body`` in ``collection``, replacing one of its name left by an earlier run."""
    name = body["metadata"]["name"]
    try:
        cluster.api.delete(f"{collection}/{name}")
    except ApiError as error:
        if error.status != 404:
            raise
    cluster.api.create(collection, body)
