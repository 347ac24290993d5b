"""The ``Ready`` condition of pgsched's own configuration resources (Calendar,
NotificationPolicy): what their controller made of the latest spec, written to their
status only when it changed (a re-list would otherwise patch every object again)."""

from __future__ import annotations

from datetime import datetime

from pgsched.k8s.client import api
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting.status import carry_transitions


def write(
    kube: api.KubeApi,
    status_path: str,
    body: Obj,
    *,
    ready: bool,
    reason: str,
    message: str,
    now: datetime,
) -> None:
    """Merge-patch ``status`` (observedGeneration, conditions) of ``body`` at
    ``status_path``; an object deleted meanwhile is no error."""
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
    }
    current = body.get("status") or {}
    new = {
        "observedGeneration": body["metadata"].get("generation"),
        "conditions": carry_transitions([condition], current, now=now),
    }
    if {key: current.get(key) for key in new} == new:
        return
    try:
        kube.merge_patch(status_path, {"status": new})
    except api.ApiError as error:
        if not error.not_found:
            raise
