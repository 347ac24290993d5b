"""Pod Security violations of a jobTemplate, told at the Job's creation.

Pod Security admission *enforces* only on pods. On a Job it evaluates the pod template
against the namespace's ``warn`` level and answers with a ``Warning`` header
(``would violate PodSecurity "restricted:latest": privileged (container "main" must not set
securityContext.privileged=true), ...``); the Job is created all the same, and later every
pod the Job controller tries to make is refused (``FailedCreate`` events), so the run would
only end when its orphan timeout passes.

The warning is free (it comes with the create's answer) but is not the verdict: ``warn`` may
differ from ``enforce``. So the namespace's labels are read (one GET, only when such a
warning came back) and the launch fails only when the namespace *enforces* a level at least
as strict as the one warned about, at the same version: a pod that violates ``baseline``
violates ``restricted`` too. Without an ``enforce`` label (the cluster's default level,
which the API does not show) or when the labels cannot be read, the launch goes on and the
warning is logged.

Kubernetes warns about a Job only at the namespace's ``warn`` level, so a namespace that
sets ``enforce`` alone gives no warning: label ``warn`` with the same level.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pgsched.k8s.client import api

log = logging.getLogger(__name__)

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")  # each one's checks include the previous'
_WARNING = re.compile(
    r'^would violate PodSecurity "(?P<level>[a-z]+):(?P<version>[^"]+)": (?P<detail>.+)$', re.S
)


@dataclass(frozen=True)
class Violation:
    level: str
    version: str
    detail: str  # the checks that fail, each naming the container and the field


def violation_in(warnings: list[str]) -> Violation | None:
    """The Pod Security violation the API server warned about, if any."""
    for text in warnings:
        match = _WARNING.match(text.strip())
        if match and match["level"] in LEVELS:
            return Violation(match["level"], match["version"], match["detail"])
    return None


def enforced(violation: Violation, labels: dict[str, str]) -> bool:
    """Whether a namespace with ``labels`` refuses a pod with ``violation``."""
    level = labels.get(ENFORCE_LABEL)
    if level not in LEVELS:
        return False
    version = labels.get(ENFORCE_VERSION_LABEL) or "latest"
    return version == violation.version and LEVELS.index(level) >= LEVELS.index(violation.level)


def enforced_violation(kube: api.KubeApi, namespace: str, warnings: list[str]) -> str | None:
    """If the Job just created in ``namespace`` got a Pod Security warning that the
    namespace enforces, what to tell the user; else None (a warning is then logged)."""
    violation = violation_in(warnings)
    if violation is None:
        return None
    policy = f"{violation.level}:{violation.version}"
    try:
        found = kube.get(api.path_of(plural="namespaces", name=namespace))
    except api.ApiError as error:
        log.warning(
            "namespace %s: the API server warns that a Job would violate Pod Security %s (%s);"
            " could not read the namespace's labels to see whether it is enforced: %s",
            namespace,
            policy,
            violation.detail,
            error,
        )
        return None
    labels = (found.get("metadata") or {}).get("labels") or {}
    if not enforced(violation, labels):
        log.warning(
            "namespace %s: a Job would violate Pod Security %s, which the namespace does not"
            " enforce (enforce=%s): %s",
            namespace,
            policy,
            labels.get(ENFORCE_LABEL, "<unset>"),
            violation.detail,
        )
        return None
    return (
        f"the jobTemplate violates Pod Security {policy}, which namespace {namespace} enforces"
        f" (its pods would be refused): {violation.detail}; fix the pod template's"
        " securityContext (e.g. privileged: false, allowPrivilegeEscalation: false,"
        ' runAsNonRoot: true, capabilities: {drop: ["ALL"]}, seccompProfile: {type:'
        " RuntimeDefault})"
    )
