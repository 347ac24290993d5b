"""The pod ``status`` the node reports, shaped like the kubelet's.

Controllers read these fields, not our intentions: the Job controller counts a pod by
``phase`` and reads exit codes from ``containerStatuses[].state.terminated``; readiness
comes from the ``Ready`` condition. Conditions keep their ``lastTransitionTime`` until their
status actually changes, as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devenv.processnode.containers import ContainerSlot, Termination, now

Obj = dict[str, Any]


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(slot: ContainerSlot, *, image_id: str) -> Obj:
    status: Obj = {
        "name": slot.name,
        "image": slot.spec["image"],
        "imageID": image_id,
        "restartCount": slot.restart_count,
        # A regular init container counts as ready once it has completed, as in the kubelet.
        "ready": slot.ready or (slot.kind == "init" and slot.succeeded),
        "started": slot.running and slot.started.is_set(),
    }
    if slot.process is not None:
        status["containerID"] = f"devenv://{slot.process.pid}"
        status["state"] = {"running": {"startedAt": timestamp(slot.process.started_at)}}
    elif slot.termination is not None and not slot.waiting_reason:
        status["containerID"] = slot.termination.container_id
        status["state"] = {"terminated": _terminated(slot.termination)}
    else:
        waiting: Obj = {"reason": slot.waiting_reason}
        if slot.waiting_message:
            waiting["message"] = slot.waiting_message
        status["state"] = {"waiting": waiting}
    last = slot.termination if "waiting" in status["state"] else slot.last_termination
    status["lastState"] = {"terminated": _terminated(last)} if last is not None else {}
    return status


def _terminated(termination: Termination) -> Obj:
    out: Obj = {
        "exitCode": termination.exit_code,
        "reason": termination.reason,
        "startedAt": timestamp(termination.started_at),
        "finishedAt": timestamp(termination.finished_at),
    }
    if termination.container_id:
        out["containerID"] = termination.container_id
    if termination.message:
        out["message"] = termination.message
    if termination.signal is not None:
        out["signal"] = termination.signal
    return out


@dataclass
class Condition:
    status: bool
    reason: str = ""
    message: str = ""


class Conditions:
    """Pod conditions with stable transition times."""

    def __init__(self) -> None:
        self._current: dict[str, tuple[Condition, datetime]] = {}

    def set(self, kind: str, condition: Condition) -> None:
        previous = self._current.get(kind)
        if previous is not None and previous[0].status == condition.status:
            self._current[kind] = (condition, previous[1])
        else:
            self._current[kind] = (condition, now())

    def render(self) -> list[Obj]:
        out = []
        for kind, (condition, since) in self._current.items():
            entry: Obj = {
                "type": kind,
                "status": "True" if condition.status else "False",
                "lastProbeTime": None,
                "lastTransitionTime": timestamp(since),
            }
            if condition.reason:
                entry["reason"] = condition.reason
            if condition.message:
                entry["message"] = condition.message
            out.append(entry)
        return out


def unready_message(kind: str, slots: Sequence[ContainerSlot]) -> str:
    names = " ".join(s.name for s in slots)
    return f"containers with {kind} status: [{names}]"
