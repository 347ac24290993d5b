"""Operator replicas as local processes, for tests and benchmarks.

``start_operator`` runs ``pgsched operator`` (the real entry point, in this checkout's
environment) against a local cluster and a database, with its own free health and metrics
ports, its run API published to the cluster's pods (``devenv.run_api``) and its log in a
file, and waits until ``/healthz`` answers. Tests use it through the ``operators`` fixture;
the Kubernetes benchmarks use it directly. (The Helm chart path — operator pods on the real
node under real RBAC — is ``make demo`` and the chart tests.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devenv import run_api
from devenv.controlplane import ControlPlane
from devenv.processes import free_port
from devenv.run_api import RunApi
from devenv.waiting import wait_for

# The image `make images` builds from the root Dockerfile (also tagged with the chart's
# appVersion); job pods run their heartbeat sidecar from it.
IMAGE = "ghcr.io/pgsched/pgsched:dev"


@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    metrics_port: int
    run_api: RunApi
    # Waits for the process to end, however it ends, then withdraws its run API endpoint.
    watcher: threading.Thread

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def healthy(self) -> bool:
        return self._health() is not None

    def listed(self) -> bool:
        """Every watch of the operator has listed its objects once (``/healthz`` says)."""
        return bool((self._health() or {}).get("listed"))

    def _health(self) -> dict[str, object] | None:
        """``/healthz``'s answer while healthy, else None."""
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as response:
                answer = json.loads(response.read())
                return answer if response.status == 200 and isinstance(answer, dict) else None
        except (OSError, ValueError):
            return None

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.watcher.join()
        return self.process.returncode

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.watcher.join()


def start_operator(
    cluster: ControlPlane,
    *,
    dsn: str,
    namespaces: str,
    log_path: Path,
    wait: bool = True,
    timeout: float = 60,
    **env: str,
) -> OperatorProcess:
    """Start one replica of the installation on ``dsn``; ``env`` adds or overrides
    PGSCHED_* settings. ``wait``: until it is healthy and its run API routed to pods."""
    health, metrics = free_port(), free_port()
    published = run_api.publish(cluster, dsn, wait=wait)
    environment = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PGSCHED_DSN": dsn,
        "PGSCHED_NAMESPACES": namespaces,
        "PGSCHED_IMAGE": IMAGE,
        "PGSCHED_HEALTH_BIND": f"127.0.0.1:{health}",
        "PGSCHED_METRICS_BIND": f"127.0.0.1:{metrics}",
        **published.environment(),
        **env,
    }
    environment.pop("KUBERNETES_SERVICE_HOST", None)  # never mistake the host for a pod
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pgsched.cli.main", "operator"],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def withdraw_when_ended() -> None:
        process.wait()
        run_api.withdraw(cluster, published)

    watcher = threading.Thread(
        target=withdraw_when_ended, name=f"run API of operator {process.pid}", daemon=True
    )
    watcher.start()
    handle = OperatorProcess(process, log_path, health, metrics, published, watcher)
    if wait:
        wait_for(
            lambda: handle.healthy() or process.poll() is not None,
            timeout,
            describe=lambda: f"the operator to become healthy; log:\n{handle.log()[-3000:]}",
        )
        if process.poll() is not None:
            raise RuntimeError(
                f"the operator exited with {process.returncode}:\n{handle.log()[-3000:]}"
            )
    return handle
