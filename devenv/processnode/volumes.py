"""Pod volumes as host directories, and the rewrite that makes ``mountPath`` usable.

Without mount namespaces a process cannot see ``/run/pgsched`` as "its" emptyDir, so each
volume becomes a directory of the pod (``<pod>/volumes/<name>``) and every occurrence of a
container's ``mountPath`` (as a whole path, or a prefix of one) in its command, args, env
values and workingDir is replaced by that directory. Two containers sharing an emptyDir
therefore see the same files, and two pods using the same mountPath never collide. A path a
program computes internally is not rewritten: pass paths through args or env (pgsched does).

Supported sources: emptyDir, configMap, secret, downwardAPI, projected (serviceAccountToken,
configMap, secret, downwardAPI) and hostPath (the host path itself). Contents are written
once at pod start; later ConfigMap/Secret edits are not propagated.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from devenv.processnode.env import ContainerConfigError, Lookup, field_value

Obj = dict[str, Any]
# Issues a token for the pod's ServiceAccount: (audience or None, expirationSeconds) → token.
TokenIssuer = Callable[[str | None, int], str]

SUPPORTED = ("emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath")


def prepare(
    pod: Obj, pod_root: Path, *, lookup: Lookup, issue_token: TokenIssuer
) -> dict[str, Path]:
    """Create every volume of the pod; return volume name → host directory (or file)."""
    paths: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        kind = next((k for k in SUPPORTED if k in volume), None)
        if kind is None:
            other = next(k for k in volume if k != "name")
            raise ContainerConfigError(
                f"volume {name!r}: {other} volumes are not supported by the process node "
                f"(supported: {', '.join(SUPPORTED)})"
            )
        if kind == "hostPath":
            paths[name] = Path(volume["hostPath"]["path"])
            continue
        target = pod_root / "volumes" / name
        target.mkdir(parents=True, exist_ok=True)
        source = volume[kind]
        if kind == "configMap":
            _write_object_keys(target, source, lookup, "configmaps", "name")
        elif kind == "secret":
            _write_object_keys(target, source, lookup, "secrets", "secretName")
        elif kind == "downwardAPI":
            _write_downward(target, source, pod)
        elif kind == "projected":
            for projection in source.get("sources") or []:
                _write_projection(target, projection, pod, lookup, issue_token)
        paths[name] = target
    return paths


def _write_projection(
    target: Path, projection: Obj, pod: Obj, lookup: Lookup, issue_token: TokenIssuer
) -> None:
    if "serviceAccountToken" in projection:
        spec = projection["serviceAccountToken"]
        token = issue_token(spec.get("audience"), int(spec.get("expirationSeconds", 3600)))
        _write_file(target / spec["path"], token.encode(), 0o600)
    elif "configMap" in projection:
        _write_object_keys(target, projection["configMap"], lookup, "configmaps", "name")
    elif "secret" in projection:
        _write_object_keys(target, projection["secret"], lookup, "secrets", "name")
    elif "downwardAPI" in projection:
        _write_downward(target, projection["downwardAPI"], pod)
    else:
        raise ContainerConfigError(f"projected volume source {sorted(projection)} not supported")


def _write_object_keys(target: Path, source: Obj, lookup: Lookup, kind: str, name_key: str) -> None:
    obj = lookup(kind, source[name_key])
    if obj is None:
        if source.get("optional"):
            return
        singular = "configmap" if kind == "configmaps" else "secret"
        raise ContainerConfigError(f'{singular} "{source[name_key]}" not found')
    data: dict[str, bytes] = {}
    if kind == "secrets":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    items = source.get("items")
    mode = int(source.get("defaultMode", 0o644))
    if items is None:
        for key, value in data.items():
            _write_file(target / key, value, mode)
        return
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"couldn't find key {item['key']} in {source[name_key]}")
        _write_file(target / item["path"], data[item["key"]], int(item.get("mode", mode)))


def _write_downward(target: Path, source: Obj, pod: Obj) -> None:
    for item in source.get("items") or []:
        if "fieldRef" not in item:
            raise ContainerConfigError("downwardAPI resourceFieldRef items are not supported")
        value = field_value(pod, item["fieldRef"]["fieldPath"])
        _write_file(target / item["path"], value.encode(), int(source.get("defaultMode", 0o644)))


def _write_file(path: Path, content: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)


class MountRewriter:
    """Replaces a container's mountPaths with their host directories in strings."""

    def __init__(self, container: Obj, volume_paths: Mapping[str, Path]) -> None:
        self.mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            host = volume_paths.get(mount["name"])
            if host is None:
                raise ContainerConfigError(f"volumeMount {mount['name']!r} names no pod volume")
            if mount.get("subPath"):
                host = host / mount["subPath"]
                if not host.exists():
                    host.mkdir(parents=True)
            self.mounts[mount["mountPath"].rstrip("/") or "/"] = host
        # Longest first, so /data/cache wins over /data; a match must be a whole path
        # component sequence: not preceded or followed by more path characters.
        alternatives = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        self._pattern = (
            re.compile(rf"(?<![\w.\-/])({alternatives})(?=/|$|[^\w.\-])") if self.mounts else None
        )

    def rewrite(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: str(self.mounts[m.group(1)]), text)

    def mounts_path(self, path: str) -> bool:
        """Does ``path`` (already rewritten) lie in one of the mounted host directories?"""
        return any(Path(path).is_relative_to(host) for host in self.mounts.values())
