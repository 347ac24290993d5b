"""A container's environment and command line, resolved the way the kubelet does it.

Order and semantics follow kubelet's ``makeEnvironmentVariables``: ``envFrom`` sources first
(keys with an optional prefix), then ``env`` entries in order, each ``value`` expanded with
``$(VAR)`` against the variables defined before it; then ``command`` and ``args`` are
expanded against the final environment. ``expand`` is a transcription of Kubernetes'
``third_party/forked/golang/expansion``: ``$$`` is a literal ``$`` and an undefined
``$(VAR)`` stays as written.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]
# Fetches a Secret or ConfigMap of the pod's namespace by name; None if it does not exist.
Lookup = Callable[[str, str], Obj | None]


class ContainerConfigError(Exception):
    """The container cannot be configured yet (kubelet: CreateContainerConfigError)."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == "$":
                out.append("$")
                advance = 1
            elif nxt == "(":
                closer = text.find(")", cursor + 2)
                if closer == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = text[cursor + 2 : closer]
                    out.append(variables.get(name, f"$({name})"))
                    advance = closer - cursor
            else:
                out.append("$" + nxt)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def container_env(
    container: Obj, pod: Obj, *, lookup: Lookup, service_env: Mapping[str, str]
) -> dict[str, str]:
    """The variables Kubernetes would set for ``container`` (not including image defaults)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        kind = "configmaps" if "configMapRef" in source else "secrets"
        ref = source["configMapRef" if kind == "configmaps" else "secretRef"]
        obj = lookup(kind, ref["name"])
        if obj is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'{_singular(kind)} "{ref["name"]}" not found')
        for key, value in _data(obj, kind).items():
            env[prefix + key] = value
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" in entry:
            resolved = _value_from(entry["valueFrom"], pod, container, lookup, namespace)
            if resolved is not None:  # an optional reference that does not resolve: unset
                env[name] = resolved
        else:
            env[name] = expand(entry.get("value", ""), {**service_env, **env})
    return env


def _singular(kind: str) -> str:
    return {"configmaps": "configmap", "secrets": "secret"}[kind]


def _data(obj: Obj, kind: str) -> dict[str, str]:
    if kind == "secrets":
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def _value_from(
    source: Obj, pod: Obj, container: Obj, lookup: Lookup, namespace: str
) -> str | None:
    for ref_key, kind in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
        if ref_key in source:
            ref = source[ref_key]
            obj = lookup(kind, ref["name"])
            data = _data(obj, kind) if obj is not None else {}
            if ref["key"] in data:
                return data[ref["key"]]
            if ref.get("optional"):
                return None
            if obj is None:
                raise ContainerConfigError(f'{_singular(kind)} "{ref["name"]}" not found')
            what = "Secret" if kind == "secrets" else "ConfigMap"
            raise ContainerConfigError(
                f"couldn't find key {ref['key']} in {what} {namespace}/{ref['name']}"
            )
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return _resource_value(container, source["resourceFieldRef"])
    raise ContainerConfigError(f"unsupported valueFrom source {sorted(source)}")


def field_value(pod: Obj, path: str) -> str:
    """The downward API's ``fieldRef`` values (the same set the API server validates)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: meta["name"],
        "metadata.namespace": lambda: meta["namespace"],
        "metadata.uid": lambda: meta["uid"],
        "spec.nodeName": lambda: spec.get("nodeName", ""),
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", ""),
        "status.hostIP": lambda: status.get("hostIP", ""),
        "status.hostIPs": lambda: ",".join(ip["ip"] for ip in status.get("hostIPs") or []),
        "status.podIP": lambda: status.get("podIP", ""),
        "status.podIPs": lambda: ",".join(ip["ip"] for ip in status.get("podIPs") or []),
    }
    if path in simple:
        return simple[path]()
    for prefix in ("labels", "annotations"):
        if path == f"metadata.{prefix}":
            items = sorted((meta.get(prefix) or {}).items())
            return "\n".join(f'{key}="{value}"' for key, value in items)
        if path.startswith(f"metadata.{prefix}['") and path.endswith("']"):
            key = path[len(f"metadata.{prefix}['") : -2]
            return str((meta.get(prefix) or {}).get(key, ""))
    raise ContainerConfigError(f"unsupported fieldRef.fieldPath {path!r}")


def _resource_value(container: Obj, ref: Obj) -> str:
    # Only what can be answered without a quantity parser: the value as written. A divisor
    # or a limit left unset would need node allocatable; say so instead of guessing.
    section, _, resource = ref["resource"].partition(".")
    value = ((container.get("resources") or {}).get(section) or {}).get(resource)
    if value is None or ref.get("divisor") not in (None, "1", "0"):
        raise ContainerConfigError(
            f"resourceFieldRef {ref['resource']}: the process node supports only resources "
            f"set on the container, without a divisor"
        )
    return str(value)
