"""Run the Argo CD health checks in ``deploy/argocd/`` in a real Lua interpreter.

Argo CD runs a ``health.lua`` with the resource as the global ``obj`` and takes the table
it returns. Here the resource (a dict, as the API returns it) becomes a Lua table
constructor, the script runs in Debian's ``lua5.4`` as the body of a function, and the
returned ``status`` and ``message`` are printed back. JSON null becomes an absent key,
as in Argo CD.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import pytest

CHECKS = Path(__file__).resolve().parents[1] / "deploy" / "argocd"
STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


class Health(NamedTuple):
    status: str
    message: str


def health(kind: str, obj: dict[str, Any]) -> Health:
    """The verdict of ``deploy/argocd/health-<kind>.lua`` on ``obj``."""
    lua = shutil.which("lua5.4")
    if lua is None:
        pytest.fail("the Argo CD health checks run in Debian's Lua: apt-get install lua5.4")
    script = (CHECKS / f"health-{kind}.lua").read_text()
    program = (
        f"obj = {_lua(obj)}\n"
        f"local hs = (function()\n{script}\nend)()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    done = subprocess.run(
        [lua, "-"], input=program, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    status, _, message = done.stdout.partition("\n")
    assert status in STATUSES, done.stdout
    return Health(status, message)


def _lua(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_char(char) for char in value) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(_lua(item) for item in value) + "}"
    if isinstance(value, dict):
        fields = (
            f"[{_lua(str(key))}] = {_lua(item)}" for key, item in value.items() if item is not None
        )
        return "{" + ", ".join(fields) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


def _char(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if char.isascii() and char.isprintable():
        return char
    return "".join(f"\\{byte:03d}" for byte in char.encode())
