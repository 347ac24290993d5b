"""Operator replicas as local processes, for tests and benchmarks.

``start_operator`` runs ``pgsched operator`` (the real entry point, in this checkout's
environment) against a kubeconfig and a database, with its own free health and metrics
ports and its log in a file, and waits until ``/healthz`` answers. Tests use it through the
``operators`` fixture; the Kubernetes benchmarks use it directly. (The Helm chart path —
operator pods on the real node under real RBAC — is ``make demo`` and the chart tests.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devenv.processes import free_port
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
        return self.process.returncode

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def start_operator(
    *,
    kubeconfig: Path,
    dsn: str,
    namespaces: str,
    log_path: Path,
    wait: bool = True,
    timeout: float = 60,
    **env: str,
) -> OperatorProcess:
    """Start one replica; ``env`` adds or overrides PGSCHED_* settings."""
    health, metrics = free_port(), free_port()
    environment = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PGSCHED_DSN": dsn,
        "PGSCHED_NAMESPACES": namespaces,
        "PGSCHED_IMAGE": IMAGE,
        "PGSCHED_HEALTH_BIND": f"127.0.0.1:{health}",
        "PGSCHED_METRICS_BIND": f"127.0.0.1:{metrics}",
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
    handle = OperatorProcess(process, log_path, health, metrics)
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
