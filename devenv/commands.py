"""Running the real ``kubectl`` and ``helm`` against a local control plane.

Both get the admin kubeconfig explicitly (never the user's ``~/.kube/config``) and a private
HOME-independent cache, so tests cannot touch another cluster. Failures raise with the
command line, exit code and both output streams.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class CommandError(RuntimeError):
    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        super().__init__(
            f"{' '.join(map(str, result.args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )


def environment(kubeconfig: Path) -> dict[str, str]:
    """This process's environment, with ``kubeconfig`` and the private client caches."""
    cache = kubeconfig.parent / "client-cache"
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KUBECACHEDIR": str(cache / "kube"),
        "HELM_CACHE_HOME": str(cache / "helm" / "cache"),
        "HELM_CONFIG_HOME": str(cache / "helm" / "config"),
        "HELM_DATA_HOME": str(cache / "helm" / "data"),
    }


def run(
    argv: list[str | Path],
    *,
    kubeconfig: Path,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(arg) for arg in argv],
        input=input,
        capture_output=True,
        text=True,
        env=environment(kubeconfig),
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise CommandError(result)
    return result
