"""Seeing the workload end from the heartbeat sidecar, in a pod that shares its process
namespace (``shareProcessNamespace: true`` in the jobTemplate).

Without it the sidecar learns of the workload's end from kubelet's SIGTERM, about a second
late, and ``concurrencyPolicy: Replace`` starts the next run that much later. With a shared
process namespace the workload's processes are visible in ``/proc``, and the sidecar notes
the end within :data:`POLL_SECONDS` of the last one's exit. The workload's processes are
those of containers (cgroups) that started after the sidecar.

The operator turns this on (``PGSCHED_SHARED_PROCESS_NAMESPACE``) only when the jobTemplate
has no native sidecar of its own; whatever this cannot see ending, kubelet's SIGTERM still
notes.

How the processes are told apart: docs/architecture.md, "Seeing the workload end".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
PROC = Path("/proc")


def cgroups_by_pid(proc: Path = PROC) -> dict[int, str]:
    """Every live process but PID 1 and this one, with its cgroup (zombies and processes
    gone while read are left out)."""
    found: dict[int, str] = {}
    own = os.getpid()
    for pid in _pids(proc):
        if pid in (1, own):
            continue
        try:
            stat = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
            cgroup = (proc / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue  # ended while we looked
        # stat is "pid (comm) state ...": comm may hold spaces and parentheses.
        if stat.rpartition(")")[2].split()[:1] == ["Z"]:
            continue
        found[pid] = cgroup
    return found


def _pids(proc: Path) -> Iterator[int]:
    try:
        entries = list(proc.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.isdigit():
            yield int(entry.name)


def watch(
    on_end: Callable[[], None],
    stop: threading.Event,
    *,
    proc: Path = PROC,
    poll_seconds: float = POLL_SECONDS,
) -> None:
    """Call ``on_end`` once the workload's processes were seen and are all gone; return
    then, or when ``stop`` is set (SIGTERM came first)."""
    own = _own_cgroup(proc)
    before = set(cgroups_by_pid(proc).values()) | {own}
    seen: set[str] = set()
    while not stop.wait(poll_seconds):
        workload = set(cgroups_by_pid(proc).values()) - before
        if workload:
            seen |= workload
        elif seen:
            log.info("the workload's processes ended")
            on_end()
            return


def _own_cgroup(proc: Path) -> str:
    try:
        return (proc / "self" / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def start(on_end: Callable[[], None], stop: threading.Event) -> threading.Thread | None:
    """Watch in a daemon thread if this sidecar shares the pod's process namespace (it is
    not PID 1: the pause process is); otherwise say why not and return None."""
    if os.getpid() == 1:
        log.warning(
            "the pod does not share its process namespace: the workload's end is noted when"
            " kubelet stops the sidecar"
        )
        return None
    thread = threading.Thread(target=watch, args=(on_end, stop), name="workload-exit", daemon=True)
    thread.start()
    return thread
