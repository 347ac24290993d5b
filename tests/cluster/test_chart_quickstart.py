"""The README's quickstart command, run as a new user runs it (``make demo`` is this command
after ``make venv k8s images``): a process of its own, its own cluster and Postgres."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plugins.cluster import require_binaries

pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]

ROOT = Path(__file__).resolve().parents[2]
BUDGET_SECONDS = 180  # the README promises well under this on a warm machine


def test_the_quickstart_installs_the_chart_and_turns_the_examples_green():
    require_binaries()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "devenv.demo", "--once", "--timeout=120"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUDGET_SECONDS,
    )
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr

    assert result.returncode == 0, output[-6000:]
    assert "green: hello-every-minute, ledger-import completed" in output
    table = output.rsplit("$ kubectl get sj -n pgsched-demo", 1)[1]
    # Each example showed COMPLETED in some printed table (by the last one, an
    # every-minute job may already be RUNNING its next occurrence).
    rows = [line for line in output.splitlines() if "COMPLETED" in line]
    for name in ("hello-every-minute", "ledger-import"):
        assert any(row.startswith(name + " ") for row in rows), name
    assert re.search(
        r"ledger-report\s+FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;\S*\s+Europe/Sofia", table
    )
    # The last screen is `kubectl logs` of a run's pod, every container: the workload's own
    # output and the heartbeat sidecar's lines, served by the real kubelet.
    [screen] = re.findall(
        r"^\$ kubectl -n pgsched-demo logs \S+ --all-containers --prefix\n(?:\[pod/.*\n)+",
        output,
        re.M,
    )
    assert re.search(r"^\[pod/\S+/hello\] hello from pgsched run \d+", screen, re.M), screen
    assert re.search(r"^\[pod/\S+/pgsched-heartbeat\] .*run \d+", screen, re.M), screen
    # It says how to look around, and cleans up after itself.
    assert "kubectl -n pgsched-demo get sj -w" in output
    [kubeconfig] = re.findall(r"export KUBECONFIG=(\S+)", output)
    assert not Path(kubeconfig).exists()
    print(f"quickstart green and stopped in {elapsed:.1f}s")
