"""The launcher's side of a process node: start it, wait until it is schedulable, stop it.

A node runs as its own Python process (``python -m devenv.processnode``) so that its
threads, its children and a crash stay out of the test process. Each container it starts
leaves a marker in ``<state>/pgids``; if the node dies without cleaning up (SIGKILL in a chaos
test), ``stop()`` still finds and kills those process groups.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from devenv import processes
from devenv.adminclient import AdminClient, ApiError, Obj
from devenv.processnode import logs
from devenv.processnode.containers import kill_recorded_groups


class NodeHandle:
    def __init__(
        self,
        name: str,
        *,
        kubeconfig: Path,
        state_dir: Path,
        log_path: Path,
        pod_cidr: str,
        labels: dict[str, str],
        extra_args: list[str],
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        argv = [
            sys.executable,
            "-m",
            "devenv.processnode",
            f"--kubeconfig={kubeconfig}",
            f"--name={name}",
            f"--state-dir={state_dir}",
            f"--pod-cidr={pod_cidr}",
            *[f"--label={key}={value}" for key, value in labels.items()],
            *extra_args,
        ]
        self.process = processes.ManagedProcess(f"node {name}", argv, log_path=log_path)

    def start(self, *, api: AdminClient, timeout: float) -> None:
        self.process.start()
        deadline = time.monotonic() + timeout
        last: Obj | None = None
        while True:
            self.process.check_alive()
            try:
                last = api.get(f"/api/v1/nodes/{self.name}")
            except ApiError as error:
                if error.status != 404:
                    raise
            if last is not None and _schedulable(last):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {self.name} not Ready and untainted after {timeout}s; "
                    f"last seen: {last and last.get('status', {}).get('conditions')}, "
                    f"taints {last and last.get('spec', {}).get('taints')}; "
                    f"log: {self.process.log_path}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM the node (it stops its pods' processes), then kill any group it left."""
        self.process.stop(grace=15.0)
        kill_recorded_groups(self.state_dir / "pgids")

    def pod_logs(
        self, namespace: str, name: str, container: str | None = None, *, previous: bool = False
    ) -> str | None:
        return logs.read(self.state_dir, namespace, name, container, previous=previous)


def _schedulable(node: Obj) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    tainted = bool(node.get("spec", {}).get("taints"))
    return ready and not tainted and not node.get("spec", {}).get("unschedulable")
