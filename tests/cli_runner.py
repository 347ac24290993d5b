"""Run the real ``pgsched`` command line as a subprocess, as a person or script would.

A subprocess, not ``main()`` in-process: exit codes, stdout/stderr separation and the
logging set-up are then exactly what users get. ``HOME`` points at an empty directory and
``KUBECONFIG`` is unset unless given, so no test ever reads a real cluster's credentials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Removed when the test process exits (a bare mkdtemp left one behind per pytest run).
_HOME_DIRECTORY = tempfile.TemporaryDirectory(prefix="pgsched-cli-home-")
_HOME = Path(_HOME_DIRECTORY.name)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def pgsched(
    *argv: str,
    dsn: str | None = None,
    kubeconfig: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    executable: list[str] | None = None,
) -> Result:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "PGSCHED_DSN"}
    }
    environment["HOME"] = str(_HOME)
    if dsn is not None:
        environment["PGSCHED_DSN"] = dsn
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(kubeconfig)
    environment.update(env or {})
    completed = subprocess.run(
        [*(executable or [sys.executable, "-m", "pgsched.cli.main"]), *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(completed.returncode, completed.stdout, completed.stderr)


def kubeconfig_in(directory: Path, *, namespace: str) -> Path:
    """A kubeconfig whose current context's namespace is ``namespace``; its server is a
    closed local port, so nothing can reach a real cluster through it."""
    path = directory / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"contexts: [{{name: c, context: {{cluster: k, user: u, namespace: {namespace}}}}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    return path
