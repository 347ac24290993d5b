"""Start and stop a real Kubernetes control plane on loopback, in seconds.

etcd, kube-apiserver and kube-controller-manager run as child processes with generated
certificates, free ports and a throwaway work directory; process nodes (``add_node``) play
kubelet and scheduler. The API server runs with the settings that matter to pgsched on real
clusters: RBAC and Node authorization, the default admission chain with Pod Security, bound
service-account tokens. Tests, benchmarks and ``make demo`` share this one launcher:

    with ControlPlane() as cp:
        cp.add_node("node-1")
        subprocess.run([kubectl, "--kubeconfig", cp.kubeconfig, "get", "nodes"])

or from a shell: ``python -m devenv.controlplane up`` (prints the kubeconfig path).
``restart_apiserver()`` keeps etcd, certificates and port, so clients reconnect to the same
cluster — the fault the chaos tests inject.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from devenv import commands, kubeconfig, pki, processes
from devenv.adminclient import AdminClient, ApiError
from devenv.binaries import Binaries
from devenv.nodes import NodeHandle

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP, first address of the range
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# After SIGTERM the API server stops listening and drains ordinary requests within
# milliseconds, then waits up to a minute for its own loopback watch connections to close.
# Nothing is lost by not waiting for those.
APISERVER_STOP_GRACE = 3.0

# Controllers pgsched and its tests depend on, plus what they need to work as on a real
# cluster: pod GC (orphaned pods of deleted nodes), the kube-root-ca.crt ConfigMap, and
# aggregation of the admin/edit/view ClusterRoles that charts bind to.
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "ttl-after-finished-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    "pod-garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "cronjob-controller",  # the benchmarks compare pgsched with built-in CronJobs
    "disruption-controller",  # PodDisruptionBudgets of the Helm chart
)


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager (+ process nodes); a context manager."""

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        binaries: Binaries | None = None,
        verbosity: int = 1,
        keep_work_dir: bool = False,
    ) -> None:
        self.binaries = binaries or Binaries.locate()
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="pgsched-k8s-"))
        self.keep_work_dir = keep_work_dir
        self.verbosity = verbosity
        self.apiserver_port = processes.free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.nodes: dict[str, NodeHandle] = {}
        self._etcd_client_port = 0
        self._etcd: processes.ManagedProcess | None = None
        self._apiserver: processes.ManagedProcess | None = None
        self._controller_manager: processes.ManagedProcess | None = None
        self._pki: pki.ControlPlanePKI | None = None
        self._api: AdminClient | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, *, timeout: float = 60.0) -> None:
        """Start everything and return once the API server is ready and controllers run."""
        processes.install_signal_handlers()
        try:
            self._pki = pki.create(self.work_dir / "pki", service_ip=SERVICE_IP)
            self._write_kubeconfigs(self._pki)
            self._start_etcd(timeout=timeout)
            self.start_apiserver(timeout=timeout)
            self._start_controller_manager(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop nodes (and their pods), then the controller manager, API server and etcd."""
        for node in list(self.nodes.values()):
            node.stop()
        self.nodes.clear()
        if self._controller_manager is not None:
            self._controller_manager.stop()
        self.stop_apiserver()
        if self._etcd is not None:
            self._etcd.stop()
        if self._owns_work_dir and not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    @property
    def ca_file(self) -> Path:
        return self._require_pki().ca.cert

    @property
    def api(self) -> AdminClient:
        """An admin client (system:masters) for setup and assertions."""
        if self._api is None:
            self._api = AdminClient.from_kubeconfig(self.kubeconfig)
        return self._api

    # -- the API server, restartable -------------------------------------------------------

    def start_apiserver(self, *, timeout: float = 60.0) -> None:
        keys = self._require_pki()
        etcd_url = f"http://127.0.0.1:{self._etcd_client_port}"
        self._apiserver = processes.ManagedProcess(
            "kube-apiserver",
            [
                self.binaries.kube_apiserver,
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The endpoint reconciler refuses loopback addresses; nothing here routes
                # through the `kubernetes` Service anyway (pods get the real address).
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={keys.apiserver.cert}",
                f"--tls-private-key-file={keys.apiserver.key}",
                f"--client-ca-file={keys.ca.cert}",
                f"--requestheader-client-ca-file={keys.ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={keys.front_proxy_client.cert}",
                f"--proxy-client-key-file={keys.front_proxy_client.key}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={keys.service_account_pub}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # The default chain already includes PodSecurity; naming it documents intent.
                "--enable-admission-plugins=PodSecurity",
                # Let Pod Security admission, not this flag, be what rejects privileged pods.
                "--allow-privileged=true",
                "--profiling=false",
                f"--v={self.verbosity}",
            ],
            log_path=self.work_dir / "logs" / "kube-apiserver.log",
        )
        self._apiserver.start()
        self._wait_ready(self._apiserver, "/readyz", timeout=timeout)

    def stop_apiserver(self) -> None:
        if self._apiserver is not None:
            self._apiserver.stop(grace=APISERVER_STOP_GRACE)

    def restart_apiserver(self, *, downtime: float = 0.0, timeout: float = 60.0) -> None:
        """Stop the API server, stay down ``downtime`` seconds, start it again (same etcd,
        certificates and port) and wait until it is ready."""
        self.stop_apiserver()
        time.sleep(downtime)
        self.start_apiserver(timeout=timeout)

    # -- nodes -----------------------------------------------------------------------------

    def add_node(
        self,
        name: str = "node-1",
        *,
        labels: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        timeout: float = 30.0,
    ) -> NodeHandle:
        """Start a process node and wait until its Node is Ready and schedulable."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} already runs in this control plane")
        node = NodeHandle(
            name,
            kubeconfig=self.kubeconfig,
            state_dir=self.work_dir / "nodes" / name,
            log_path=self.work_dir / "logs" / f"{name}.log",
            pod_cidr=f"127.{len(self.nodes) + 1}.0.0/16",
            labels=labels or {},
            extra_args=extra_args or [],
        )
        node.start(api=self.api, timeout=timeout)
        self.nodes[name] = node
        return node

    def stop_node(self, name: str) -> None:
        """Stop the node and its pods' processes and delete its Node object (the pod GC
        then removes pods still bound to it)."""
        self.nodes.pop(name).stop()
        try:
            self.api.delete(f"/api/v1/nodes/{name}")
        except ApiError as error:
            if error.status != 404:
                raise

    def pod_logs(
        self, namespace: str, name: str, container: str | None = None, *, previous: bool = False
    ) -> str:
        """What ``kubectl logs`` would print (there is no kubelet to serve it; see the docs)."""
        for node in self.nodes.values():
            text = node.pod_logs(namespace, name, container, previous=previous)
            if text is not None:
                return text
        raise FileNotFoundError(f"no logs for pod {namespace}/{name} on any process node")

    def kubectl(
        self, *args: str | Path, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the venv's kubectl as cluster admin."""
        return commands.run(
            [self.binaries.kubectl, *args], kubeconfig=self.kubeconfig, input=input, check=check
        )

    def helm(
        self, *args: str | Path, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the cached helm as cluster admin."""
        return commands.run(
            [self.binaries.helm, *args], kubeconfig=self.kubeconfig, input=input, check=check
        )

    def memory(self) -> dict[str, int]:
        """Resident set size in bytes of every process this control plane runs."""
        running = [self._etcd, self._apiserver, self._controller_manager]
        rss = {p.name: p.rss_bytes() for p in running if p is not None and p.running()}
        rss.update({node.name: node.process.rss_bytes() for node in self.nodes.values()})
        return rss

    # -- internals -------------------------------------------------------------------------

    def _require_pki(self) -> pki.ControlPlanePKI:
        if self._pki is None:
            raise RuntimeError("the control plane has not been started")
        return self._pki

    def _write_kubeconfigs(self, keys: pki.ControlPlanePKI) -> None:
        kubeconfig.write(
            self.kubeconfig,
            server=self.server,
            ca_file=keys.ca.cert,
            user="kubernetes-admin",
            cert_file=keys.admin.cert,
            key_file=keys.admin.key,
        )
        kubeconfig.write(
            self.work_dir / "controller-manager.kubeconfig",
            server=self.server,
            ca_file=keys.ca.cert,
            user="system:kube-controller-manager",
            cert_file=keys.controller_manager.cert,
            key_file=keys.controller_manager.key,
        )

    def _start_etcd(self, *, timeout: float) -> None:
        self._etcd_client_port = processes.free_port()
        peer_url = f"http://127.0.0.1:{processes.free_port()}"
        client_url = f"http://127.0.0.1:{self._etcd_client_port}"
        self._etcd = processes.ManagedProcess(
            "etcd",
            [
                self.binaries.etcd,
                "--name=devenv",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=devenv={peer_url}",
                # A throwaway cluster does not need durability; fsync dominates start-up.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log_path=self.work_dir / "logs" / "etcd.log",
        )
        self._etcd.start()
        processes.wait_port(
            "127.0.0.1", self._etcd_client_port, timeout=timeout, process=self._etcd
        )

    def _start_controller_manager(self, *, timeout: float) -> None:
        keys = self._require_pki()
        config = self.work_dir / "controller-manager.kubeconfig"
        self._controller_manager = processes.ManagedProcess(
            "kube-controller-manager",
            [
                self.binaries.kube_controller_manager,
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={processes.free_port()}",
                f"--cert-dir={self.work_dir / 'controller-manager'}",
                f"--controllers={','.join(CONTROLLERS)}",
                # Each controller acts as its own ServiceAccount, as on real clusters.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={keys.service_account_key}",
                f"--root-ca-file={keys.ca.cert}",
                "--leader-elect=false",
                f"--v={self.verbosity}",
            ],
            log_path=self.work_dir / "logs" / "kube-controller-manager.log",
        )
        self._controller_manager.start()
        # Controllers are running once the ServiceAccount controller has created the
        # `default` ServiceAccount (pods cannot be admitted before that).
        deadline = time.monotonic() + timeout
        while not self._exists("/api/v1/namespaces/default/serviceaccounts/default"):
            self._controller_manager.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"kube-controller-manager did not create default/default ServiceAccount in "
                    f"{timeout}s; log: {self._controller_manager.log_path}"
                )
            time.sleep(0.1)

    def _exists(self, path: str) -> bool:
        try:
            self.api.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _wait_ready(self, process: processes.ManagedProcess, path: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            process.check_alive()
            try:
                self.api.request("GET", path)
                return
            except Exception as error:  # refused, TLS not up yet, 500 while starting: retry
                last = error
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{process.name} not ready at {self.server}{path} after {timeout}s: {last}; "
                    f"log: {process.log_path}"
                )
            time.sleep(0.1)


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv.controlplane",
        description="Run a local Kubernetes control plane with process nodes until Ctrl-C.",
    )
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--nodes", type=int, default=1, help="process nodes to start")
    parser.add_argument("--work-dir", type=Path, help="keep state here (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    started = time.monotonic()
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane(work_dir=args.work_dir) as cp:
        for index in range(args.nodes):
            cp.add_node(f"node-{index + 1}")
        print(f"control plane ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        print(f"logs: {cp.work_dir / 'logs'}", file=sys.stderr)
        print(f"export KUBECONFIG={cp.kubeconfig}", file=sys.stderr)
        print(cp.kubeconfig, flush=True)
        _wait_for_interrupt()
    return 0


if __name__ == "__main__":
    sys.exit(main())
