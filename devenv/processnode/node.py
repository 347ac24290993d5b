"""The process node: a Node object, a scheduler for itself, and a kubelet for its pods.

Threads, each with one job:

- heartbeat: renews the node's Lease every 10 s and re-posts Ready status every minute,
  so a node-lifecycle controller (if one runs) never marks it NotReady;
- scheduler: watches unbound pods and binds those that fit (see ``scheduling``);
- pods: watches pods bound to this node and hands each to a ``PodRunner`` thread.

The TaintNodesByCondition admission plugin gives every new Node the
``node.kubernetes.io/not-ready`` taint; removing it once Ready is normally the
node-lifecycle controller's job, which this control plane does not run, so the node does it.

A node restarted over its old state cannot re-attach to the processes of pods it had
started; it kills them (their process groups are recorded) and fails those pods with reason
``NodeRestarted`` rather than silently running a ``restartPolicy: Never`` container twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devenv.adminclient import AdminClient, ApiError, namespaced
from devenv.binaries import kubernetes_version
from devenv.processnode import scheduling
from devenv.processnode.containers import kill_recorded_groups
from devenv.processnode.images import ImageMap
from devenv.processnode.podips import PodIPPool
from devenv.processnode.pods import NodeContext, PodRunner
from devenv.watching import run_reflector

Obj = dict[str, Any]
log = logging.getLogger(__name__)

HOST_IP = "127.0.0.1"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
STATUS_EVERY_HEARTBEATS = 6
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True)
class NodeConfig:
    name: str
    kubeconfig: Path
    state_dir: Path
    images: ImageMap
    pod_cidr: str = "127.1.0.0/16"
    labels: Mapping[str, str] = field(default_factory=dict)


class ProcessNode:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.api = AdminClient.from_kubeconfig(config.kubeconfig, timeout=10.0)
        self.context = NodeContext(
            api=self.api,
            node_name=config.name,
            host_ip=HOST_IP,
            state_dir=config.state_dir,
            images=config.images,
        )
        self.ips = PodIPPool(config.pod_cidr)
        self.stop = threading.Event()
        self._node: Obj = {}
        self._runners: dict[str, PodRunner] = {}
        self._finished: set[str] = set()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Register, serve until ``stop`` is set, then kill every pod's processes."""
        kill_recorded_groups(self.config.state_dir / "pgids")
        self._register()
        threads = [
            threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True),
            threading.Thread(
                target=run_reflector,
                name="scheduler",
                daemon=True,
                args=(self.api, "/api/v1/pods"),
                kwargs={
                    "handler": self._on_unbound_pod,
                    "stop": self.stop,
                    "query": {"fieldSelector": "spec.nodeName="},
                },
            ),
            threading.Thread(
                target=run_reflector,
                name="pods",
                daemon=True,
                args=(self.api, "/api/v1/pods"),
                kwargs={
                    "handler": self._on_own_pod,
                    "stop": self.stop,
                    "query": {"fieldSelector": f"spec.nodeName={self.config.name}"},
                },
            ),
        ]
        for thread in threads:
            thread.start()
        log.info("node %s: serving pods from %s", self.config.name, self.config.pod_cidr)
        self.stop.wait()
        self._shutdown()

    # -- registration and heartbeats -------------------------------------------------------

    def _register(self) -> None:
        name = self.config.name
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(),
            **self.config.labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"podCIDR": self.config.pod_cidr, "podCIDRs": [self.config.pod_cidr]},
        }
        try:
            self._node = self.api.create("/api/v1/nodes", body)
        except ApiError as error:
            if error.status != 409:
                raise
            self._node = self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
        self._post_status()
        self._remove_not_ready_taint()
        self._renew_lease()

    def _post_status(self) -> None:
        moment = _now()
        conditions = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{_memory_kib()}Ki",
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": kind,
                    "status": value,
                    "reason": reason,
                    "message": f"process node: {reason}",
                    "lastHeartbeatTime": moment,
                    "lastTransitionTime": self._transition_time(kind, value, moment),
                }
                for kind, value, reason in conditions
            ],
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": self.config.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": f"pgsched process node on {platform.system()}",
                "containerRuntimeVersion": "pgsched-devenv://processes",
                "kubeletVersion": kubernetes_version(),
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": _arch(),
            },
        }
        self._node = self.api.patch(f"/api/v1/nodes/{self.config.name}/status", {"status": status})

    def _transition_time(self, kind: str, value: str, moment: str) -> str:
        for condition in (self._node.get("status") or {}).get("conditions") or []:
            if condition["type"] == kind and condition["status"] == value:
                return str(condition["lastTransitionTime"])
        return moment

    def _remove_not_ready_taint(self) -> None:
        for _ in range(10):
            taints = self._node.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t["key"] != NOT_READY_TAINT]
            if kept == taints:
                return
            patch = {
                "metadata": {"resourceVersion": self._node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept or None},
            }
            try:
                self._node = self.api.patch(f"/api/v1/nodes/{self.config.name}", patch)
                return
            except ApiError as error:
                if error.status != 409:
                    raise
                self._node = self.api.get(f"/api/v1/nodes/{self.config.name}")
        raise RuntimeError(f"could not remove the {NOT_READY_TAINT} taint: conflicts persisted")

    def _renew_lease(self) -> None:
        name = self.config.name
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        path = namespaced("leases", "kube-node-lease", name, api_version="coordination.k8s.io/v1")
        try:
            self.api.patch(path, {"spec": spec})
        except ApiError as error:
            if error.status != 404:
                raise
            owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": self._node["metadata"]["uid"],
            }
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "ownerReferences": [owner]},
                "spec": spec,
            }
            self.api.create(path.rsplit("/", 1)[0], lease)

    def _heartbeat(self) -> None:
        beats = 0
        while not self.stop.wait(HEARTBEAT_SECONDS):
            beats += 1
            try:
                self._renew_lease()
                if beats % STATUS_EVERY_HEARTBEATS == 0:
                    self._post_status()
            except (ApiError, OSError) as error:
                log.info("node %s: heartbeat failed (%s); retrying", self.config.name, error)

    # -- scheduling ------------------------------------------------------------------------

    def _on_unbound_pod(self, event: str, pod: Obj) -> None:
        if event == "DELETED" or not scheduling.fits(pod, self._node):
            return
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.config.name},
        }
        try:
            self.api.create(
                namespaced("pods", meta["namespace"], meta["name"]) + "/binding", binding
            )
        except ApiError as error:
            if error.status not in (404, 409):  # gone, or another node was faster
                log.warning("node %s: binding %s failed: %s", self.config.name, meta["name"], error)

    # -- pods ------------------------------------------------------------------------------

    def _on_own_pod(self, event: str, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            runner = self._runners.get(uid)
            if event == "DELETED":
                if runner is not None:
                    runner.forget()
                return
            if runner is not None:
                runner.observe(pod)
                return
            if uid in self._finished:
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                if meta.get("deletionTimestamp"):
                    self._delete_now(pod)
                return
            if _was_started(pod):
                self._finished.add(uid)
                self._fail_lost_pod(pod)
                return
            runner = PodRunner(pod, context=self.context, pod_ip=self.ips.allocate())
            self._runners[uid] = runner
        threading.Thread(
            target=self._run_pod, args=(runner,), name=f"pod-{meta['name']}", daemon=True
        ).start()

    def _run_pod(self, runner: PodRunner) -> None:
        try:
            runner.run()
        finally:
            with self._lock:
                self._runners.pop(runner.uid, None)
                self._finished.add(runner.uid)
            self.ips.release(runner.pod_ip)

    def _delete_now(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiError, OSError):
            self.api.delete(namespaced("pods", meta["namespace"], meta["name"]), body)

    def _fail_lost_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        status = {
            "phase": "Failed",
            "reason": "NodeRestarted",
            "message": "the process node restarted and lost this pod's processes",
        }
        path = namespaced("pods", meta["namespace"], meta["name"]) + "/status"
        with contextlib.suppress(ApiError, OSError):
            self.api.patch(path, {"status": status})
        if meta.get("deletionTimestamp"):
            self._delete_now(pod)

    def _shutdown(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.forget()
        for runner in runners:
            runner.done.wait(10.0)


def _was_started(pod: Obj) -> bool:
    status = pod.get("status") or {}
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    return any(
        "running" in s.get("state", {}) or "terminated" in s.get("state", {}) for s in statuses
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _memory_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemTotal line")
