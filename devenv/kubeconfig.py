"""Writing kubeconfig files: the admin's, the controller manager's and each pod's.

Certificates are referenced by absolute path rather than inlined, so a human can open the
files next to the kubeconfig; pod kubeconfigs inline the token because a pod's identity is
exactly that token.
"""

from __future__ import annotations

from pathlib import Path

import yaml

CLUSTER_NAME = "pgsched-devenv"


def write(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    user: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    credentials: dict[str, str] = {}
    if cert_file is not None and key_file is not None:
        credentials = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    elif token is not None:
        credentials = {"token": token}
    else:
        raise ValueError(f"{path}: a kubeconfig needs a client certificate and key, or a token")
    context: dict[str, str] = {"cluster": CLUSTER_NAME, "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CLUSTER_NAME, "context": context}],
        "current-context": CLUSTER_NAME,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
