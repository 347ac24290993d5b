"""The pod's ServiceAccount identity, handed to its processes as a kubeconfig.

Like the kubelet, the node asks the TokenRequest API for a token bound to the pod (it stops
working once the pod is deleted). In-cluster client config reads a fixed path
(``/var/run/secrets/kubernetes.io/serviceaccount``) that cannot be per-pod on a shared host,
so containers that mount the ServiceAccount volume also get ``KUBECONFIG`` pointing at a
per-pod kubeconfig with that token and the cluster CA. The Python client, kopf and kubectl
all fall back to ``KUBECONFIG`` when the in-cluster files are absent, so in-pod clients act
as the pod's ServiceAccount and RBAC applies to them as on a real cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devenv import kubeconfig
from devenv.adminclient import AdminClient, namespaced

Obj = dict[str, Any]

# Where ServiceAccount admission mounts the token volume in every container.
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# Tokens outlive any test or benchmark; the kubelet would rotate them, this node does not.
KUBECONFIG_TOKEN_SECONDS = 24 * 3600


def request_token(api: AdminClient, pod: Obj, *, audience: str | None, expiration: int) -> str:
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    spec: Obj = {
        "expirationSeconds": expiration,
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }
    if audience:
        spec["audiences"] = [audience]
    path = namespaced("serviceaccounts", meta["namespace"], account) + "/token"
    answer = api.create(
        path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    )
    return str(answer["status"]["token"])


def write_pod_kubeconfig(api: AdminClient, pod: Obj, path: Path) -> Path:
    token = request_token(api, pod, audience=None, expiration=KUBECONFIG_TOKEN_SECONDS)
    return kubeconfig.write(
        path,
        server=api.credentials.server,
        ca_file=api.credentials.ca_file,
        user=f"system:serviceaccount:{pod['metadata']['namespace']}:"
        f"{pod['spec'].get('serviceAccountName') or 'default'}",
        token=token,
        namespace=pod["metadata"]["namespace"],
    )


def mounts_token(container: Obj) -> bool:
    """ServiceAccount admission mounted the token volume (i.e. automount is on)."""
    return any(m["mountPath"] == TOKEN_MOUNT_PATH for m in container.get("volumeMounts") or [])


def service_env(api: AdminClient) -> dict[str, str]:
    """The `kubernetes` Service variables every container gets, pointing at the real API
    server (there is no Service network on this host)."""
    host, _, port = api.credentials.server.removeprefix("https://").rpartition(":")
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": port,
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }
