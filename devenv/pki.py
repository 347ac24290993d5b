"""Certificates and keys for a throwaway control plane, made with the ``openssl`` CLI.

The CLI is on every Debian machine, so no Python crypto dependency is needed. Keys are ECDSA
P-256 (generated in milliseconds, unlike RSA) and certificates live one day: the cluster is
thrown away long before that. Client identities follow the kubeadm conventions, so RBAC sees
the same users and groups it would on a real cluster.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DAYS = "1"

# Names a client inside the cluster may use for the API server (plus the loopback IP).
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ControlPlanePKI:
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    front_proxy_client: KeyPair
    scheduler: KeyPair
    kubelet: KeyPair
    kube_proxy: KeyPair
    service_account_key: Path
    service_account_pub: Path
    # What the API server presents when it calls an admission webhook (its admission
    # configuration), signed by a CA of its own: what PGSCHED_WEBHOOK_CLIENT_CA_FILE trusts.
    webhook_client_ca: Path
    webhook_client: KeyPair


WEBHOOK_CLIENT = "webhook-client"  # the folder of the webhook client CA and certificate
_NAMES = (
    "ca",
    "apiserver",
    "admin",
    "controller-manager",
    "front-proxy-client",
    "scheduler",
    "kubelet",
    "kube-proxy",
)


def load(directory: Path) -> ControlPlanePKI:
    """The key pairs :func:`create` wrote into ``directory`` (another process's cluster)."""
    pairs = [KeyPair(directory / f"{name}.crt", directory / f"{name}.key") for name in _NAMES]
    missing = [str(pair.cert) for pair in pairs if not pair.cert.is_file()]
    if missing:
        raise FileNotFoundError(f"no control-plane certificates at {', '.join(missing)}")
    ca, apiserver, admin, controller_manager, front_proxy, scheduler, kubelet, proxy = pairs
    return ControlPlanePKI(
        ca,
        apiserver,
        admin,
        controller_manager,
        front_proxy,
        scheduler,
        kubelet,
        proxy,
        directory / "sa.key",
        directory / "sa.pub",
        directory / WEBHOOK_CLIENT / "ca.crt",
        KeyPair(
            directory / WEBHOOK_CLIENT / "client.crt", directory / WEBHOOK_CLIENT / "client.key"
        ),
    )


def create(directory: Path, *, service_ip: str, node_ip: str, node_name: str) -> ControlPlanePKI:
    """Write a CA, serving and client certificates and the service-account key pair."""
    ca = _ca(directory, "pgsched-devenv-ca")
    sans = ",".join(
        [f"DNS:{name}" for name in APISERVER_DNS_NAMES]
        + ["IP:127.0.0.1", f"IP:{service_ip}", f"IP:{node_ip}"]
    )
    apiserver = _issue(
        directory, "apiserver", ca, subject="/CN=kube-apiserver", usage="serverAuth", sans=sans
    )
    admin = _issue(
        directory, "admin", ca, subject="/O=system:masters/CN=kubernetes-admin", usage="clientAuth"
    )
    controller_manager = _issue(
        directory,
        "controller-manager",
        ca,
        subject="/CN=system:kube-controller-manager",
        usage="clientAuth",
    )
    # The aggregation layer's client identity; kube-controller-manager's delegated
    # authentication reads the request-header CA that comes with it.
    front_proxy_client = _issue(
        directory, "front-proxy-client", ca, subject="/CN=front-proxy-client", usage="clientAuth"
    )
    scheduler = _issue(
        directory, "scheduler", ca, subject="/CN=system:kube-scheduler", usage="clientAuth"
    )
    # The Node authorizer and NodeRestriction admission know a kubelet by this identity.
    kubelet = _issue(
        directory,
        "kubelet",
        ca,
        subject=f"/O=system:nodes/CN=system:node:{node_name}",
        usage="clientAuth",
    )
    kube_proxy = _issue(
        directory, "kube-proxy", ca, subject="/CN=system:kube-proxy", usage="clientAuth"
    )
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _genkey(sa_key)
    _openssl(f"pkey -in {sa_key} -pubout -out {sa_pub}")
    webhook_ca = _ca(directory / WEBHOOK_CLIENT, "pgsched-devenv-webhook-client-ca")
    webhook_client = _issue(
        directory / WEBHOOK_CLIENT,
        "client",
        webhook_ca,
        subject="/CN=kube-apiserver-webhook-client",
        usage="clientAuth",
    )
    return ControlPlanePKI(
        ca,
        apiserver,
        admin,
        controller_manager,
        front_proxy_client,
        scheduler,
        kubelet,
        kube_proxy,
        sa_key,
        sa_pub,
        webhook_ca.cert,
        webhook_client,
    )


def serving_tls(
    directory: Path, *, ips: Sequence[str], ca_name: str, names: Sequence[str] = ()
) -> Path:
    """A CA ``ca_name`` and a serving certificate for ``ips`` (the first is its subject) and
    host ``names``, laid out as a TLS Secret mounts them (``ca.crt``, ``tls.crt``,
    ``tls.key``): what ``PGSCHED_WEBHOOK_CERT_DIR``, ``PGSCHED_RUN_API_CERT_DIR`` and
    Kueue's webhook name."""
    ca = _ca(directory, ca_name)
    _issue(
        directory,
        "tls",
        ca,
        subject=f"/CN={ips[0]}",
        usage="serverAuth",
        sans=",".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{name}" for name in names)]),
    )
    return directory


def _ca(directory: Path, name: str) -> KeyPair:
    if " " in str(directory):
        raise ValueError(f"{directory}: the PKI directory path must not contain spaces")
    directory.mkdir(parents=True, exist_ok=True)
    ca = KeyPair(directory / "ca.crt", directory / "ca.key")
    _genkey(ca.key)
    _openssl(
        f"req -x509 -new -days {DAYS} -subj /CN={name}",
        f"-key {ca.key} -out {ca.cert}",
        "-addext basicConstraints=critical,CA:TRUE",
        "-addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    return ca


def _issue(
    directory: Path, name: str, ca: KeyPair, *, subject: str, usage: str, sans: str | None = None
) -> KeyPair:
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        lines.append(f"subjectAltName={sans}")
    extensions.write_text("\n".join(lines) + "\n")
    _genkey(pair.key)
    _openssl(f"req -new -key {pair.key} -out {csr}", subject=subject)
    _openssl(
        f"x509 -req -in {csr} -CA {ca.cert} -CAkey {ca.key} -CAcreateserial",
        f"-out {pair.cert} -days {DAYS} -extfile {extensions}",
    )
    return pair


def _genkey(path: Path) -> None:
    _openssl(f"genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {path}")
    path.chmod(0o600)


def _openssl(*chunks: str, subject: str | None = None) -> None:
    """Run openssl; each chunk is split on spaces (our paths have none), ``subject`` is not."""
    argv = ["openssl"] + [word for chunk in chunks for word in chunk.split()]
    if subject is not None:
        argv += ["-subj", subject]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
