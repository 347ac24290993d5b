"""The node's stand-in for kube-scheduler: may this pending pod be bound to this node?

Deliberately minimal: scheduling gates, ``spec.schedulerName``, ``nodeSelector`` and
NoSchedule/NoExecute taints against tolerations. Affinity, spreading and resource fit are
ignored (the node has room for anything). With several process nodes the first node whose
Binding succeeds wins; the others get 409 Conflict and move on.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

SCHEDULER_NAME = "default-scheduler"


def fits(pod: Obj, node: Obj) -> bool:
    spec = pod["spec"]
    if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if spec.get("schedulingGates"):
        return False
    if spec.get("schedulerName", SCHEDULER_NAME) != SCHEDULER_NAME:
        return False
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = spec.get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in node["spec"].get("taints") or []
        if taint["effect"] in ("NoSchedule", "NoExecute")
    )


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return bool(
        toleration.get("key") == taint["key"]
        and toleration.get("value", "") == taint.get("value", "")
    )
