"""Kueue, the batch working group's admission queue, as a host process on the local cluster.

``hack/kueue/build.sh`` (``make kueue``) builds Kueue's controller manager from the official
``sigs.k8s.io/kueue`` module into ``$PGSCHED_CACHE_DIR/kueue/<version>/`` with its CRDs
(``crd/``) and webhook manifests (``webhook/manifests.yaml``) copied from the same module.
``Kueue(cluster).start()`` runs it as a real deployment would, with what a cluster without
Kueue's Deployment needs instead:

- its CRDs applied and established;
- a Configuration: no leader election, Kueue's internal certificate management off, the
  ``batch/job`` integration alone, ``manageJobsWithoutQueueName: false`` (only Jobs with
  the ``kueue.x-k8s.io/queue-name`` label are Kueue's), the webhook server, health probes
  and metrics on free loopback ports, and no visibility API server (it would need an
  APIService and certificates of its own; ``VisibilityOnDemand`` off);
- its webhooks — the ones for Jobs and for Kueue's own kinds, from its manifests — rewritten
  from the in-cluster Service to ``url: https://127.0.0.1:<port>/<path>`` with a CA bundle
  (``devenv.pki``), which the API server reaches through ``ControlPlane.reach_host_port``;
  given ``namespaces``, the Jobs' webhooks are called for Jobs of those namespaces only (a
  ``namespaceSelector``), so the tests of other namespaces on a shared cluster never wait
  on Kueue's webhook server, nor fail while it starts or stops.

With its certificate management off Kueue reads its metrics certificate from the fixed path
``/etc/kueue/metrics/certs``, where a Deployment mounts a Secret. Here Kueue runs in a
private mount namespace whose ``/etc`` is the host's with that directory laid over it
(a read-only overlay): the host's ``/etc`` is not touched, and the mount goes with the
process.

Started once Kueue answers ``/readyz`` (its webhook server listens). ``stop()`` deletes
Kueue's objects while it still runs (Workloads, ClusterQueues and ResourceFlavors carry its
finalizers), then its webhook configurations (a Job created after Kueue stopped would
otherwise be refused by a webhook nobody serves), then stops the process.
"""

from __future__ import annotations

import base64
import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devenv import pki, processes
from devenv.binaries import REPO_ROOT, MissingBinariesError, cache_dir, required_version
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for

GO_MOD = REPO_ROOT / "hack" / "kueue" / "go.mod"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Every Namespace has it, set by the API server to its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# The release names its webhook configurations with this prefix (its kustomization).
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
# Kueue's objects, deleted in this order at stop: what holds quota before the quota. Its
# Jobs first: Kueue would make a new Workload for a Job that still has its label.
OBJECTS = (
    ("jobs", "--selector", QUEUE_LABEL),
    ("workloads", "--all"),
    ("localqueues", "--all"),
    ("clusterqueues", "--all"),
    ("resourceflavors", "--all"),
)


def version() -> str:
    """The ``sigs.k8s.io/kueue`` version pinned in ``hack/kueue/go.mod`` (e.g. ``v0.17.0``)."""
    return required_version(GO_MOD, "sigs.k8s.io/kueue")


def build_dir() -> Path:
    """Where ``hack/kueue/build.sh`` puts the binary (``bin/kueue``) and its manifests."""
    return cache_dir() / "kueue" / version()


def locate() -> Path:
    """The built Kueue directory, or ``MissingBinariesError`` naming the fix."""
    built = build_dir()
    wanted = [built / "bin" / "kueue", built / "webhook" / "manifests.yaml", built / "crd"]
    missing = [str(path) for path in wanted if not path.exists()]
    if missing:
        raise MissingBinariesError(f"missing {', '.join(missing)}: build with `make kueue`")
    return built


def webhook_configurations(
    manifests: str, *, url: str, ca_bundle: str, namespaces: list[str] | None = None
) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfigurations from its ``manifests.yaml``: the
    webhooks for Jobs and for Kueue's own kinds (the integrations this Configuration
    enables), each calling ``url`` + its path instead of the in-cluster Service; the Jobs'
    for ``namespaces`` only when given. Pure."""
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document or document.get("kind") not in WEBHOOK_CONFIGURATIONS:
            continue
        webhooks = []
        for webhook in document["webhooks"]:
            groups = {group for rule in webhook["rules"] for group in rule["apiGroups"]}
            resources = {res for rule in webhook["rules"] for res in rule["resources"]}
            if not (groups == {"kueue.x-k8s.io"} or (groups, resources) == ({"batch"}, {"jobs"})):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            rewritten = {**webhook, "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle}}
            if namespaces is not None and groups == {"batch"}:
                rewritten["namespaceSelector"] = {
                    "matchExpressions": [
                        {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": namespaces}
                    ]
                }
            webhooks.append(rewritten)
        configurations.append(
            {
                "apiVersion": document["apiVersion"],
                "kind": document["kind"],
                "metadata": {"name": WEBHOOK_CONFIGURATIONS[document["kind"]]},
                "webhooks": webhooks,
            }
        )
    return configurations


class Kueue:
    """One Kueue controller manager against ``cluster``; ``start()``/``stop()``. Given
    ``namespaces``, its webhooks see the Jobs of those namespaces only."""

    def __init__(
        self, cluster: ControlPlane, *, work_dir: Path, namespaces: list[str] | None = None
    ) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.namespaces = namespaces
        self.built = locate()
        self.webhook_port = processes.free_port()
        self.health_port = processes.free_port()
        self.metrics_port = processes.free_port()
        self.process: processes.ManagedProcess | None = None

    def start(self, *, timeout: float = 90.0) -> None:
        self.cluster.apply_crds(self.built / "crd", server_side=True)  # Workload's: 1.4 MB
        certs = pki.serving_tls(
            self.work_dir / "certs", ips=["127.0.0.1"], ca_name="kueue-webhook-ca"
        )
        # What /etc/kueue/metrics/certs shows Kueue (see the module's docstring).
        etc = self.work_dir / "etc"
        metrics_certs = etc / "kueue" / "metrics" / "certs"
        metrics_certs.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, metrics_certs / name)
        config = self.work_dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self._configuration(certs)))
        ca_bundle = _base64(certs / "ca.crt")
        manifests = (self.built / "webhook" / "manifests.yaml").read_text()
        url = f"https://127.0.0.1:{self.webhook_port}"
        for configuration in webhook_configurations(
            manifests, url=url, ca_bundle=ca_bundle, namespaces=self.namespaces
        ):
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(configuration))
        self.cluster.reach_host_port(self.webhook_port)
        binary = self.built / "bin" / "kueue"
        overlay = f"mount -t overlay kueue-etc -o ro,lowerdir={etc}:/etc /etc"
        self.process = processes.ManagedProcess(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation=private",
                "--",
                "sh",
                "-c",
                f'{overlay} && exec "$0" "$@"',
                binary,
                f"--config={config}",
                "--zap-log-level=info",
            ],
            log_path=self.work_dir / "kueue.log",
            env={"KUBECONFIG": str(self.cluster.kubeconfig), "PATH": "/usr/sbin:/usr/bin:/bin"},
        )
        self.process.start()
        self._wait_ready(timeout)

    def stop(self) -> None:
        """Delete Kueue's objects and webhook configurations, then stop the process."""
        try:
            if self.process is not None and self.process.running():
                for objects in OBJECTS:
                    self.cluster.kubectl(
                        "delete", *objects, "--all-namespaces", "--timeout=60s", check=False
                    )
        finally:
            for kind, name in WEBHOOK_CONFIGURATIONS.items():
                self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
            if self.process is not None:
                self.process.stop()

    def log(self) -> str:
        return processes.log_tail(self.work_dir / "kueue.log", lines=60)

    def _configuration(self, certs: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"VisibilityOnDemand": False},
        }

    def _wait_ready(self, timeout: float) -> None:
        process = self.process
        if process is None:
            raise RuntimeError("Kueue has not been started")
        wait_for(
            lambda: self._ready() or not process.running(),
            timeout,
            describe=lambda: f"Kueue to answer /readyz; log:\n{self.log()}",
        )
        process.check_alive()

    def _ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def _base64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
