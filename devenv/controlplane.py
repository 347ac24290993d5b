"""Start and stop a real Kubernetes cluster with one real node, in seconds.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as child processes with
generated certificates and a throwaway work directory, inside the node's network namespace
(``devenv.node``); ``add_node`` starts the real node (containerd, kubelet, kube-proxy) there.
The host reaches the API server at ``https://127.0.0.1:<port>`` through a relay. The API
server runs with the settings that matter to pgsched on real clusters: RBAC and Node
authorization, the default admission chain with Pod Security, bound service-account tokens.
Tests, benchmarks and ``make demo`` share this one launcher:

    with ControlPlane() as cp:
        cp.add_node("node-1")
        subprocess.run([kubectl, "--kubeconfig", cp.kubeconfig, "get", "nodes"])

or from a shell: ``python -m devenv.controlplane up`` (prints the kubeconfig path).
``restart_apiserver()`` keeps etcd, certificates and port, so clients reconnect to the same
cluster — the fault the chaos tests inject.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from devenv import commands, kubeconfig, node, pki, processes
from devenv.adminclient import AdminClient, ApiError, ApiUnreachable, Obj
from devenv.binaries import Binaries, image_index, warn_if_images_stale
from devenv.node import NODE_IP, RealNode, in_netns
from devenv.waiting import wait_for

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP, first address of the range
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The port name of the Services in front of relays (a Service and its EndpointSlices name
# a port alike).
RELAYED_PORT = "relayed"
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
    # The real node: Ready/NotReady and the not-ready taint, eviction from a dead node,
    # EndpointSlices for Services with selectors (kube-proxy reads those).
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "endpointslice-controller",
)
# How long a node may miss status updates before the node-lifecycle controller marks it
# NotReady (kubelet reports every 4 s here); the upstream default is 50 s.
NODE_MONITOR_GRACE = "20s"


class SharedClusterError(RuntimeError):
    """What a test process attached to a shared cluster may not do (``ControlPlane.attach``)."""


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler (+ the real node, with
    ``add_node``) in the node's network namespace; a context manager."""

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        binaries: Binaries | None = None,
        verbosity: int = 1,
        keep_work_dir: bool = False,
        host_only: bool = False,
    ) -> None:
        """``host_only``: no node and no network namespace — etcd, the API server and the
        controller manager on the host's loopback, without the machine lock (nothing of
        the node's fixed host paths is used). For benchmarks of the API side alone (a
        fleet of idle ScheduledJobs), so they never keep the real node from others."""
        self.binaries = binaries or Binaries.locate()
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="pgsched-k8s-"))
        self.keep_work_dir = keep_work_dir
        self.verbosity = verbosity
        self.apiserver_port = processes.free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        # Components inside the node's namespace reach the API server at the node's IP.
        self.host_only = host_only
        self.node_server = self.server if host_only else f"https://{NODE_IP}:{self.apiserver_port}"
        self.nodes: dict[str, RealNode] = {}
        self._etcd_client_port = 0
        self._lock = node.MachineLock()
        self._netns = False
        self._relays: list[processes.ManagedProcess] = []
        # name -> (relay, the Service's ClusterIP, the server's socket it relays to)
        self._postgres_relays: dict[str, tuple[processes.ManagedProcess, str, Path]] = {}
        # (Service, port) -> the relays of a host port published as one of its endpoints
        self._endpoint_relays: dict[tuple[str, int], list[processes.ManagedProcess]] = {}
        self._service_ips: dict[str, str] = {}  # publish_host_port's Services' ClusterIPs
        self._etcd: processes.ManagedProcess | None = None
        self._apiserver: processes.ManagedProcess | None = None
        self._controller_manager: processes.ManagedProcess | None = None
        self._scheduler: processes.ManagedProcess | None = None
        self._pki: pki.ControlPlanePKI | None = None
        self._api: AdminClient | None = None
        self._attached = False

    # -- one cluster, several test processes ----------------------------------------------

    def write_state(self, path: Path) -> None:
        """Write what another process needs to use this running cluster (:meth:`attach`)."""
        state = {
            "work_dir": str(self.work_dir),
            "apiserver_port": self.apiserver_port,
            "etcd_client_port": self._etcd_client_port,
        }
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(state) + "\n")
        partial.replace(path)  # whoever waits for the file never reads half of it

    @classmethod
    def attach(cls, state: Path, *, binaries: Binaries | None = None) -> ControlPlane:
        """The running cluster whose :meth:`write_state` wrote ``state``, for the parallel
        test workers that share one real node. It reads and writes through the same API,
        kubectl and helm, and keeps relays into the node of its own (stopped with it); what
        would change the cluster under the other workers' tests (restarting the API server
        or the node) is refused with :class:`SharedClusterError`."""
        data = json.loads(state.read_text())
        plane = cls(work_dir=Path(data["work_dir"]), binaries=binaries)
        plane.apiserver_port = int(data["apiserver_port"])
        plane.server = f"https://127.0.0.1:{plane.apiserver_port}"
        plane.node_server = f"https://{NODE_IP}:{plane.apiserver_port}"
        plane._etcd_client_port = int(data["etcd_client_port"])
        plane._pki = pki.load(plane.work_dir / "pki")
        plane._attached = True
        return plane

    def _alone(self, what: str) -> None:
        if self._attached:
            raise SharedClusterError(
                f"{what} would change the cluster under the tests other workers run on it:"
                " mark the test `exclusive` (it then runs alone on the node, not beside the parallel ones)"
            )

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
        self._alone("starting a control plane")
        processes.install_signal_handlers()
        if self.host_only:
            self._start_host_only(timeout=timeout)
            return
        node.check_machine()
        self._lock.acquire()
        try:
            node.clean_host()  # whatever a crashed session left
            node.create_netns(SERVICE_CIDR)
            self._netns = True
            self._pki = pki.create(
                self.work_dir / "pki", service_ip=SERVICE_IP, node_ip=NODE_IP, node_name="node-1"
            )
            self._write_kubeconfigs(self._pki)
            self._start_apiserver_relay()
            self._start_etcd(timeout=timeout)
            self.start_apiserver(timeout=timeout)
            self._start_controller_manager(timeout=timeout)
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise

    def _start_host_only(self, *, timeout: float) -> None:
        try:
            self._pki = pki.create(
                self.work_dir / "pki", service_ip=SERVICE_IP, node_ip=NODE_IP, node_name="node-1"
            )
            self._write_kubeconfigs(self._pki)
            self._start_etcd(timeout=timeout)
            self.start_apiserver(timeout=timeout)
            self._start_controller_manager(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def _contained(self, argv: list[str | Path]) -> list[str]:
        """A control-plane process: in the node's network namespace, unless host-only."""
        return [str(arg) for arg in argv] if self.host_only else in_netns(argv)

    def stop(self) -> None:
        """Stop the node (and its containers), the control plane and the relays, and leave
        nothing behind on the machine (mounts, cgroups, the namespace), then drop the lock."""
        if self._attached:
            self._stop_relays()
            return
        try:
            for real_node in list(self.nodes.values()):
                real_node.stop()
            self.nodes.clear()
            for process in (self._scheduler, self._controller_manager):
                if process is not None:
                    process.stop()
            self.stop_apiserver()
            if self._etcd is not None:
                self._etcd.stop()
            self._stop_relays()
            if self._netns:
                node.clean_host()
                self._netns = False
        finally:
            self._lock.release()
        if self._owns_work_dir and not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _stop_relays(self) -> None:
        for relay, _, _ in self._postgres_relays.values():
            relay.stop(grace=1.0)
        self._postgres_relays.clear()
        for key in list(self._endpoint_relays):
            for relay in self._endpoint_relays.pop(key, []):
                relay.stop(grace=1.0)
        for relay in self._relays:
            relay.stop(grace=1.0)
        self._relays.clear()

    @property
    def ca_file(self) -> Path:
        return self._require_pki().ca.cert

    @property
    def certificates(self) -> pki.ControlPlanePKI:
        """The cluster's key pairs (a test presents the front proxy's, or an admin's)."""
        return self._require_pki()

    @property
    def api(self) -> AdminClient:
        """An admin client (system:masters) for setup and assertions."""
        if self._api is None:
            self._api = AdminClient.from_kubeconfig(self.kubeconfig)
        return self._api

    # -- the API server, restartable -------------------------------------------------------

    def start_apiserver(self, *, timeout: float = 60.0) -> None:
        self._alone("starting the API server")
        keys = self._require_pki()
        etcd_url = f"http://127.0.0.1:{self._etcd_client_port}"
        self._apiserver = processes.ManagedProcess(
            "kube-apiserver",
            self._contained(
                [
                    self.binaries.kube_apiserver,
                    f"--etcd-servers={etcd_url}",
                    # On the node's IP, so the `kubernetes` Service (10.96.0.1:443, through
                    # kube-proxy) reaches it from pods; the host comes in through the relay.
                    f"--bind-address={'127.0.0.1' if self.host_only else NODE_IP}",
                    f"--advertise-address={'127.0.0.1' if self.host_only else NODE_IP}",
                    f"--secure-port={self.apiserver_port}",
                    # For logs, exec and port-forward the API server calls the kubelet.
                    f"--kubelet-client-certificate={keys.admin.cert}",
                    f"--kubelet-client-key={keys.admin.key}",
                    "--kubelet-preferred-address-types=InternalIP",
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
                    # Webhook calls to a Service go to its endpoints (pod IPs), as the
                    # service proxy does: this API server's own connections to a ClusterIP
                    # do not pass kube-proxy's rules, so the chart's admission webhook would
                    # never be reached (and, failing open, never refuse anything).
                    "--enable-aggregator-routing=true",
                    # The default chain already includes PodSecurity; naming it documents intent.
                    "--enable-admission-plugins=PodSecurity",
                    f"--admission-control-config-file={self._admission_configuration(keys)}",
                    # Let Pod Security admission, not this flag, be what rejects privileged pods.
                    "--allow-privileged=true",
                    "--profiling=false",
                    f"--v={self.verbosity}",
                    # Host-only: no `kubernetes` Service endpoint (a loopback one is refused).
                    *(["--endpoint-reconciler-type=none"] if self.host_only else []),
                ]
            ),
            log_path=self.work_dir / "logs" / "kube-apiserver.log",
        )
        self._apiserver.start()
        self._wait_ready(self._apiserver, "/readyz", timeout=timeout)

    def _admission_configuration(self, keys: pki.ControlPlanePKI) -> Path:
        """The API server's admission configuration: it presents ``webhook_client`` to
        every admission webhook that asks for a client certificate (a webhook that does
        not ask, such as Kueue's, sees no difference), as an administrator configures it
        for pgsched's PGSCHED_WEBHOOK_CLIENT_CA_FILE (docs/admission.md)."""
        folder = self.work_dir / "admission"
        folder.mkdir(parents=True, exist_ok=True)
        credentials = folder / "webhook-kubeconfig.json"
        credentials.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "users": [
                        {
                            "name": "*",  # every webhook
                            "user": {
                                "client-certificate": str(keys.webhook_client.cert),
                                "client-key": str(keys.webhook_client.key),
                            },
                        }
                    ],
                }
            )
        )
        webhooks = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(credentials),
        }
        configuration = folder / "admission-configuration.json"
        configuration.write_text(
            json.dumps(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": "ValidatingAdmissionWebhook", "configuration": webhooks},
                        {"name": "MutatingAdmissionWebhook", "configuration": webhooks},
                    ],
                }
            )
        )
        return configuration

    def stop_apiserver(self) -> None:
        self._alone("stopping the API server")
        if self._apiserver is not None:
            self._apiserver.stop(grace=APISERVER_STOP_GRACE)

    def restart_apiserver(self, *, downtime: float = 0.0, timeout: float = 60.0) -> None:
        """Stop the API server, stay down ``downtime`` seconds, start it again (same etcd,
        certificates and port) and wait until it is ready."""
        self.stop_apiserver()
        time.sleep(downtime)
        self.start_apiserver(timeout=timeout)

    def etcdctl(self, *args: str, data: bytes | None = None) -> bytes:
        """Run etcdctl against this cluster's etcd (tests that need what no API request
        can do: write while the API server is down, compact history)."""
        command: list[str | Path] = [
            self.binaries.etcd.parent / "etcdctl",
            f"--endpoints=http://127.0.0.1:{self._etcd_client_port}",
            *args,
        ]
        return subprocess.run(
            self._contained(command), input=data, capture_output=True, check=True, timeout=30
        ).stdout

    # -- the node ------------------------------------------------------------------------

    def add_node(self, name: str = "node-1", *, timeout: float = 60.0) -> RealNode:
        """Start the real node (one per machine) and wait until it is Ready and schedulable."""
        self._alone("adding a node")
        if self.nodes:
            raise ValueError(
                f"the local cluster has one real node ({', '.join(self.nodes)}); "
                "kubelet and containerd share host paths and the /kubepods cgroup"
            )
        if name != "node-1":
            raise ValueError(f"{name!r}: the local node is called node-1 (its certificate)")
        if self.host_only:
            raise ValueError(
                "a host-only control plane has no node (ControlPlane(host_only=False))"
            )
        warn_if_images_stale()
        keys = self._require_pki()
        node_dir = self.work_dir / "node"
        node_dir.mkdir(parents=True, exist_ok=True)
        real_node = RealNode(
            name,
            work_dir=node_dir,
            bin_dir=self.binaries.kubelet.parent,
            image_index=image_index(),
            kubelet_kubeconfig=self.work_dir / "kubelet.kubeconfig",
            proxy_kubeconfig=self.work_dir / "kube-proxy.kubeconfig",
            ca_file=keys.ca.cert,
            verbosity=self.verbosity,
        )
        self.nodes[name] = real_node
        self.start_node(name, timeout=timeout)
        return real_node

    def start_node(self, name: str = "node-1", *, timeout: float = 60.0) -> None:
        """(Re)start the node's daemons and wait until the Node is Ready and untainted."""
        self._alone("starting the node")
        real_node = self.nodes[name]
        real_node.start()
        deadline = time.monotonic() + timeout
        last: Obj | None = None
        while True:
            real_node.kubelet.check_alive()
            try:
                last = self.api.get(f"/api/v1/nodes/{name}")
            except ApiError as error:
                if error.status != 404:
                    raise
            if last is not None and _schedulable(last):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {name} not Ready and untainted after {timeout}s; last seen: "
                    f"{last and last.get('status', {}).get('conditions')}, taints "
                    f"{last and last.get('spec', {}).get('taints')}; logs: {self.work_dir}/node/logs"
                )
            time.sleep(0.1)

    def stop_node(self, name: str = "node-1") -> None:
        """Kill the node: kubelet, kube-proxy and containerd stopped, every container killed.
        The Node object and its pods stay in the API, as when a machine loses power; the
        node-lifecycle controller marks it NotReady after NODE_MONITOR_GRACE."""
        self._alone("stopping the node")
        self.nodes[name].stop()

    def expose_postgres(self, socket_dir: Path, port: int, *, name: str = "postgres") -> str:
        """Make a Postgres on the host reachable from pods as ``<ClusterIP>:5432``: a relay in
        the node's namespace to its UNIX socket, behind a selector-less Service and an
        EndpointSlice in ``default``. Returns the Service's ClusterIP (idempotent).

        The relay listens on the server's own port number, which no other test process
        draws (``processes.free_port``); a later server on a port this process used before
        gets the relay re-pointed at its socket, behind the same Service."""
        socket = socket_dir / f".s.PGSQL.{port}"
        known = self._postgres_relays.get(name)
        if known is not None and known[2] == socket:
            return known[1]
        if known is not None:
            known[0].stop(grace=1.0)
        relay = processes.ManagedProcess(
            f"postgres relay {name}",
            in_netns(
                [
                    "socat",
                    f"TCP-LISTEN:{port},bind={NODE_IP},fork,reuseaddr",
                    f"UNIX-CONNECT:{socket}",
                ]
            ),
            log_path=self.work_dir / "logs" / f"relay-{name}.log",
        )
        relay.start()
        if known is None:
            cluster_ip = self._selectorless_service(name, 5432)
            self._endpoint_slice(name, f"{name}-relay", port)
        else:
            cluster_ip = known[1]
        self._postgres_relays[name] = (relay, cluster_ip, socket)
        return cluster_ip

    def publish_host_port(
        self, service: str, port: int, *, service_port: int, wait: bool = True
    ) -> str:
        """Make a server of this host at ``127.0.0.1:port`` one endpoint of the
        selector-less Service ``service`` in ``default`` (created unless it exists, on
        ``service_port`` of its ClusterIP): relays from the node's IP and that port in the
        node's namespace to the host, and an EndpointSlice of its own, ``<service>-<port>``
        (each endpoint of the Service may have its own port number; kube-proxy balances
        connections over all of them). Returns the ClusterIP; :meth:`withdraw_host_port`
        undoes it, and stopping the control plane stops the relays.

        ``wait``: until kube-proxy routes the Service's port (up to 30 s). Not for a
        replica restarted while its peers are away or the API server is down (chaos):
        nothing routes it until they are back, and the caller must go on."""
        cluster_ip = self._service_ips.get(service)
        if cluster_ip is None:
            cluster_ip = self._service_ips[service] = self._selectorless_service(
                service, service_port
            )
        self._endpoint_relays[(service, port)] = self._host_port_relays(port, bind=NODE_IP)
        self._until_the_api_answers(
            f"EndpointSlice {service}-{port} created",
            lambda: self._endpoint_slice(service, f"{service}-{port}", port),
            still_wanted=lambda: (service, port) in self._endpoint_relays,
        )
        if wait:
            self._wait_routed(cluster_ip, service_port)
        return cluster_ip

    def _until_the_api_answers(
        self, what: str, write: Callable[[], None], *, still_wanted: Callable[[], bool]
    ) -> None:
        """``write`` now, or, while the API server is down (a test's outage), again every
        half second from a thread of its own until it answers or the write is no longer
        wanted: a replica restarted during an outage gets its endpoint once the API server
        is back, as the endpoints controller would give a pod's."""
        try:
            write()
            return
        except ApiUnreachable:
            log.info("%s once the API server answers", what)

        def retry() -> None:
            while still_wanted():
                time.sleep(0.5)
                try:
                    write()
                    return
                except ApiUnreachable:
                    continue

        threading.Thread(target=retry, name=what, daemon=True).start()

    def _wait_routed(self, cluster_ip: str, port: int, timeout: float = 30.0) -> None:
        """Until kube-proxy sends connections to ``cluster_ip:port`` somewhere, seen from
        the node's namespace (where it writes its rules for pods too). A pod started sooner
        finds its first requests refused: seen on a loaded machine, a 4 s job whose sidecar
        never got a heartbeat through before the workload ended.

        Not routed within ``timeout`` is the harness's failure, raised with the probe's last
        error: a warning here once hid a probe that could never connect (the namespace had
        no route to ClusterIPs), and every operator start waited the whole 30 s for a day."""
        probe = in_netns(
            [
                sys.executable,
                "-c",
                f"import socket; socket.create_connection(({cluster_ip!r}, {port}), 1).close()",
            ]
        )

        def routed() -> bool:
            attempt = subprocess.run(probe, capture_output=True, text=True, check=False)
            if attempt.returncode != 0:
                raise ConnectionError(attempt.stderr.strip().rsplit("\n", 1)[-1])
            return True

        wait_for(
            routed,
            timeout,
            describe=f"kube-proxy to route {cluster_ip}:{port} in the node's namespace",
        )

    def withdraw_host_port(self, service: str, port: int) -> None:
        """Undo :meth:`publish_host_port`: the EndpointSlice deleted (kube-proxy stops
        sending connections there), then the relays stopped. With the API server down the
        slice goes once it is back; connections to it are refused until then."""
        relays = self._endpoint_relays.pop((service, port), None)
        if relays is None:
            return
        path = f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/{service}-{port}"

        def delete() -> None:
            try:
                self.api.delete(path)
            except ApiError as error:
                if error.status != 404:
                    raise

        try:
            self._until_the_api_answers(
                f"EndpointSlice {service}-{port} deleted",
                delete,
                still_wanted=lambda: (service, port) not in self._endpoint_relays,
            )
        finally:
            for relay in relays:
                relay.stop(grace=1.0)

    def _selectorless_service(self, name: str, port: int) -> str:
        """The Service ``name`` in ``default`` on ``port``, whose endpoints are ours to
        write (EndpointSlices labelled with its name); created, or found made by an earlier
        test process. Returns its ClusterIP."""
        service: Obj = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": [{"name": RELAYED_PORT, "port": port}]},
        }
        self._create_unless_there("/api/v1/namespaces/default/services", service)
        found = self.api.get(f"/api/v1/namespaces/default/services/{name}")
        return str(found["spec"]["clusterIP"])

    def _endpoint_slice(self, service: str, name: str, port: int) -> None:
        """An EndpointSlice of ``service``: the node's IP and ``port``, where a relay is."""
        endpoints: Obj = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
            "ports": [{"name": RELAYED_PORT, "port": port, "protocol": "TCP"}],
        }
        self._create_unless_there(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", endpoints
        )

    def _create_unless_there(self, path: str, body: Obj) -> None:
        try:
            self.api.create(path, body)
        except ApiError as error:
            if error.status != 409:
                raise

    def reach_host_port(self, port: int) -> None:
        """Let the API server reach a server of this host at ``127.0.0.1:port`` by that same
        address (an admission webhook the operator, a host process, serves). Nothing to do
        host-only; stopped with the control plane."""
        if self.host_only:
            return
        self._relays += self._host_port_relays(port, bind="127.0.0.1")

    def _host_port_relays(self, port: int, *, bind: str) -> list[processes.ManagedProcess]:
        """Relays from ``bind:port`` in the node's namespace to ``127.0.0.1:port`` of the
        host, through a UNIX socket: the apiserver relay's way reversed. Started."""
        node.RUN_DIR.mkdir(parents=True, exist_ok=True)
        sock = node.RUN_DIR / f"host-{bind}-{port}.sock"
        log_path = self.work_dir / "logs" / f"relay-host-{bind}-{port}.log"
        relays = [
            processes.ManagedProcess(
                f"host port {port} relay (host side)",
                ["socat", f"UNIX-LISTEN:{sock},fork,unlink-early", f"TCP:127.0.0.1:{port}"],
                log_path=log_path,
            ),
            processes.ManagedProcess(
                f"host port {port} relay ({bind} in the namespace)",
                in_netns(
                    [
                        "socat",
                        f"TCP-LISTEN:{port},bind={bind},fork,reuseaddr",
                        f"UNIX-CONNECT:{sock}",
                    ]
                ),
                log_path=log_path,
            ),
        ]
        for relay in relays:
            relay.start()
        return relays

    def in_cluster_dsn(self, dsn: str) -> str:
        """The same database as ``dsn`` (a Postgres on this host), as pods must reach it:
        through :meth:`expose_postgres`, at the Service's ClusterIP and port 5432. A DSN
        naming several servers (``host=a,b port=p,q``, a primary and its standby) becomes
        one naming each server's Service, in the same order, so pods follow a failover
        as the host's clients do (``target_session_attrs`` is kept)."""
        import psycopg

        ports = re.search(r"\bport=(\S+)", dsn)
        cluster_ips = []
        for port in (ports.group(1) if ports else "5432").split(","):
            # Where the server's socket is: only a superuser may read that setting, and the
            # throwaway servers (devenv.postgres) trust local connections as `postgres`.
            one = re.sub(r"\bhost=\S+", "host=127.0.0.1", dsn)
            one = re.sub(r"\bport=\S+", f"port={port}", one)
            one = re.sub(r"\btarget_session_attrs=\S+", "", one)
            superuser = re.sub(r"\buser=\S+", "user=postgres", one)
            with psycopg.connect(superuser, connect_timeout=10) as conn:
                socket_dir = str(conn.execute("SHOW unix_socket_directories").fetchone()[0])  # type: ignore[index]
            cluster_ips.append(
                self.expose_postgres(
                    Path(socket_dir.split(",")[0].strip()), int(port), name=f"postgres-{port}"
                )
            )
        rewritten = re.sub(r"\bhost=\S+", f"host={','.join(cluster_ips)}", dsn)
        return re.sub(r"\bport=\S+", "port=" + ",".join("5432" for _ in cluster_ips), rewritten)

    def pod_logs(
        self, namespace: str, name: str, container: str | None = None, *, previous: bool = False
    ) -> str:
        """``kubectl logs`` of the pod (served by the real kubelet)."""
        args = ["logs", "-n", namespace, name]
        if container is not None:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        return self.kubectl(*args).stdout

    def kubectl(
        self, *args: str | Path, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the venv's kubectl as cluster admin."""
        return commands.run(
            [self.binaries.kubectl, *args], kubeconfig=self.kubeconfig, input=input, check=check
        )

    def apply_crds(self, folder: Path, *, server_side: bool = False) -> None:
        """Apply every CRD in ``folder`` (pgsched's ``crds/``) and wait until all serve.
        ``server_side``: for CRDs too large for client-side apply's annotation (256 KiB)."""
        self.kubectl("apply", *(["--server-side"] if server_side else []), "-f", folder)
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")

    def helm(
        self, *args: str | Path, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the cached helm as cluster admin."""
        return commands.run(
            [self.binaries.helm, *args], kubeconfig=self.kubeconfig, input=input, check=check
        )

    def memory(self) -> dict[str, int]:
        """Resident set size in bytes of every process this control plane runs."""
        self._alone("measuring the control plane's memory")
        running = [self._etcd, self._apiserver, self._controller_manager]
        rss = {p.name: p.rss_bytes() for p in running if p is not None and p.running()}
        if self._scheduler is not None and self._scheduler.running():
            rss[self._scheduler.name] = self._scheduler.rss_bytes()
        for real_node in self.nodes.values():
            rss.update(real_node.memory())
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
        for file, user, pair in (
            ("controller-manager", "system:kube-controller-manager", keys.controller_manager),
            ("scheduler", "system:kube-scheduler", keys.scheduler),
            ("kubelet", "system:node:node-1", keys.kubelet),
            ("kube-proxy", "system:kube-proxy", keys.kube_proxy),
        ):
            kubeconfig.write(
                self.work_dir / f"{file}.kubeconfig",
                server=self.node_server,
                ca_file=keys.ca.cert,
                user=user,
                cert_file=pair.cert,
                key_file=pair.key,
            )

    def _start_apiserver_relay(self) -> None:
        # host 127.0.0.1:<port> -> UNIX socket -> (in the namespace) <node IP>:<port>
        # Under RUN_DIR, so that a crashed session's host-side relay is found and stopped.
        node.RUN_DIR.mkdir(parents=True, exist_ok=True)
        sock = node.RUN_DIR / "apiserver.sock"
        self._relays = [
            processes.ManagedProcess(
                "apiserver relay (namespace side)",
                in_netns(
                    [
                        "socat",
                        f"UNIX-LISTEN:{sock},fork,unlink-early",
                        f"TCP:{NODE_IP}:{self.apiserver_port}",
                    ]
                ),
                log_path=self.work_dir / "logs" / "relay-apiserver.log",
            ),
            processes.ManagedProcess(
                "apiserver relay (host side)",
                [
                    "socat",
                    f"TCP-LISTEN:{self.apiserver_port},bind=127.0.0.1,fork,reuseaddr",
                    f"UNIX-CONNECT:{sock}",
                ],
                log_path=self.work_dir / "logs" / "relay-apiserver.log",
            ),
        ]
        for relay in self._relays:
            relay.start()
        deadline = time.monotonic() + 10
        while not sock.exists():
            self._relays[0].check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the API server relay did not create {sock}")
            time.sleep(0.02)

    def _start_scheduler(self) -> None:
        config = self.work_dir / "scheduler.kubeconfig"
        self._scheduler = processes.ManagedProcess(
            "kube-scheduler",
            self._contained(
                [
                    self.binaries.kube_scheduler,
                    f"--kubeconfig={config}",
                    f"--authentication-kubeconfig={config}",
                    f"--authorization-kubeconfig={config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={processes.free_port()}",
                    "--leader-elect=false",
                    f"--v={self.verbosity}",
                ]
            ),
            log_path=self.work_dir / "logs" / "kube-scheduler.log",
        )
        self._scheduler.start()

    def _start_etcd(self, *, timeout: float) -> None:
        self._etcd_client_port = processes.free_port()
        peer_url = f"http://127.0.0.1:{processes.free_port()}"
        client_url = f"http://127.0.0.1:{self._etcd_client_port}"
        self._etcd = processes.ManagedProcess(
            "etcd",
            self._contained(
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
                    # The fleet benchmark's 100,000 ScheduledJobs and their status writes
                    # between two compactions outgrow etcd's default 2 GiB quota.
                    "--quota-backend-bytes=8589934592",
                    "--log-level=warn",
                ]
            ),
            log_path=self.work_dir / "logs" / "etcd.log",
        )
        self._etcd.start()
        # etcd listens on the namespace's loopback, out of the host's reach: the API
        # server's start-up (which waits for it) is the check.

    def _start_controller_manager(self, *, timeout: float) -> None:
        keys = self._require_pki()
        config = self.work_dir / "controller-manager.kubeconfig"
        self._controller_manager = processes.ManagedProcess(
            "kube-controller-manager",
            self._contained(
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
                    f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
                    f"--v={self.verbosity}",
                ]
            ),
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


def _schedulable(node_object: Obj) -> bool:
    conditions = node_object.get("status", {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    tainted = bool(node_object.get("spec", {}).get("taints"))
    return ready and not tainted and not node_object.get("spec", {}).get("unschedulable")


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv.controlplane",
        description="Run a local Kubernetes cluster with its real node until Ctrl-C.",
    )
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--work-dir", type=Path, help="keep state here (default: a temp dir)")
    parser.add_argument(
        "--state-file",
        type=Path,
        help="once ready, write here what other processes need to attach (ControlPlane.attach);"
        " removed on the way out",
    )
    parser.add_argument(
        "--crds",
        type=Path,
        help="apply the CRDs of this folder once ready (before the state file is written, so"
        " processes attaching at once do not all race to create them)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    started = time.monotonic()
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane(work_dir=args.work_dir) as cp:
        cp.add_node("node-1")
        print(f"control plane ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        print(f"logs: {cp.work_dir / 'logs'}", file=sys.stderr)
        print(f"export KUBECONFIG={cp.kubeconfig}", file=sys.stderr)
        print(cp.kubeconfig, flush=True)
        if args.crds is not None:
            cp.apply_crds(args.crds)
        if args.state_file is not None:
            cp.write_state(args.state_file)
        try:
            _wait_for_interrupt()
        finally:
            if args.state_file is not None:
                args.state_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
