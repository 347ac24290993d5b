"""A listener's port already taken stops the operator's start at once, naming the setting.

Seen on a busy machine: a replica's health port was taken between the choice of the port and
the replica's bind, and the replica died with a bare ``OSError`` traceback behind threads it
had started. Now the health and metrics listeners bind before any thread starts, and the
error says which setting to change.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devenv.processes import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        yield port


@pytest.mark.parametrize("setting", ["PGSCHED_HEALTH_BIND", "PGSCHED_METRICS_BIND"])
def test_a_taken_port_stops_the_start_naming_its_setting(
    dsn: str, run_api_tls: Path, taken_port: int, setting: str
) -> None:
    environment = {
        **os.environ,
        "PGSCHED_DSN": dsn,
        "PGSCHED_NAMESPACES": "default",
        "PGSCHED_IMAGE": "pgsched:test",
        "PGSCHED_RUN_API_CERT_DIR": str(run_api_tls),
        "PGSCHED_RUN_API_URL": "https://127.0.0.1:8443",
        "PGSCHED_RUN_API_BIND": f"127.0.0.1:{free_port()}",
        "PGSCHED_HEALTH_BIND": f"127.0.0.1:{free_port()}",
        "PGSCHED_METRICS_BIND": f"127.0.0.1:{free_port()}",
        setting: f"127.0.0.1:{taken_port}",
        "KUBECONFIG": "/nonexistent",  # it must stop before it ever talks to Kubernetes
    }
    result = subprocess.run(
        [sys.executable, "-m", "pgsched.cli.main", "operator", "--migrate"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert (
        f"pgsched operator: cannot start: {setting}=127.0.0.1:{taken_port}: [Errno 98]"
        in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
