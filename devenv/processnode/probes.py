"""Startup, liveness and readiness probes against the pod's loopback IP.

One thread per probe of a running container instance, with the kubelet's defaults
(period 10 s, timeout 1 s, success threshold 1, failure threshold 3) and semantics: a result
only flips after ``successThreshold`` / ``failureThreshold`` consecutive outcomes, and
liveness/readiness wait until the startup probe (if any) has succeeded. gRPC probes are not
supported (there is no gRPC client here); such a container fails to configure.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from devenv.processnode.env import ContainerConfigError

Obj = dict[str, Any]

KINDS = ("startupProbe", "livenessProbe", "readinessProbe")


def check_supported(container: Obj) -> None:
    for kind in KINDS:
        probe = container.get(kind)
        if probe is not None and not any(k in probe for k in ("exec", "httpGet", "tcpSocket")):
            raise ContainerConfigError(
                f"{kind}: only exec, httpGet and tcpSocket probes are supported by the process node"
            )


class Prober:
    """Runs one probe until ``stop`` is set; calls ``on_result(passed)`` when the verdict
    changes (the first verdict is always reported)."""

    def __init__(
        self,
        probe: Obj,
        *,
        container: Obj,
        pod_ip: str,
        env: Mapping[str, str],
        cwd: Path,
        on_result: Callable[[bool], None],
        gate: threading.Event | None,
    ) -> None:
        self._probe = probe
        self._container = container
        self._pod_ip = pod_ip
        self._env = dict(env)
        self._cwd = cwd
        self._on_result = on_result
        self._gate = gate
        self.stop = threading.Event()
        threading.Thread(target=self._run, name="probe", daemon=True).start()

    def _run(self) -> None:
        probe = self._probe
        period = float(probe.get("periodSeconds", 10))
        success_threshold = int(probe.get("successThreshold", 1))
        failure_threshold = int(probe.get("failureThreshold", 3))
        while self._gate is not None and not self._gate.is_set():
            if self.stop.wait(0.1):
                return
        if self.stop.wait(float(probe.get("initialDelaySeconds", 0))):
            return
        verdict: bool | None = None
        streak, streak_value = 0, True
        while not self.stop.is_set():
            passed = self._attempt(float(probe.get("timeoutSeconds", 1)))
            if self.stop.is_set():
                return
            streak = streak + 1 if passed == streak_value else 1
            streak_value = passed
            threshold = success_threshold if passed else failure_threshold
            if streak >= threshold and passed != verdict:
                verdict = passed
                self._on_result(passed)
            self.stop.wait(period)

    def _attempt(self, timeout: float) -> bool:
        probe = self._probe
        try:
            if "exec" in probe:
                result = subprocess.run(
                    probe["exec"]["command"],
                    env=self._env,
                    cwd=self._cwd,
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
                return result.returncode == 0
            if "httpGet" in probe:
                return self._http(probe["httpGet"], timeout)
            target = probe["tcpSocket"]
            host = target.get("host") or self._pod_ip
            with socket.create_connection((host, self._port(target["port"])), timeout=timeout):
                return True
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _http(self, spec: Obj, timeout: float) -> bool:
        scheme = spec.get("scheme", "HTTP").lower()
        host = spec.get("host") or self._pod_ip
        url = f"{scheme}://{host}:{self._port(spec['port'])}{spec.get('path', '/')}"
        headers = {h["name"]: h["value"] for h in spec.get("httpHeaders") or []}
        request = urllib.request.Request(url, headers={"User-Agent": "kube-probe/1.37", **headers})
        context = ssl._create_unverified_context()  # the kubelet does not verify either
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return 200 <= int(response.status) < 400
        except urllib.error.HTTPError as error:
            return 200 <= error.code < 400

    def _port(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        for declared in self._container.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise OSError(f"probe names port {port!r}, which the container does not declare")
