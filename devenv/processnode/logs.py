"""Where container output goes, and how tests read it back.

There is no kubelet HTTP server, so ``kubectl logs`` cannot work. Instead each container
instance writes stdout and stderr, interleaved, to a plain file laid out like the kubelet's
``/var/log/pods``:

    <state-dir>/pods/<namespace>_<pod>_<uid>/logs/<container>/<restart-count>.log

``read`` returns what ``kubectl logs [--previous]`` would show.
"""

from __future__ import annotations

from pathlib import Path


def pod_dir(state_dir: Path, namespace: str, name: str, uid: str) -> Path:
    return state_dir / "pods" / f"{namespace}_{name}_{uid}"


def log_path(pod_root: Path, container: str, restart_count: int) -> Path:
    return pod_root / "logs" / container / f"{restart_count}.log"


def read(
    state_dir: Path,
    namespace: str,
    name: str,
    container: str | None = None,
    *,
    previous: bool = False,
) -> str | None:
    """The newest pod called ``namespace/name`` on this node; None if it never ran here.

    ``container`` may be omitted when the pod ran exactly one container.
    """
    candidates = sorted(
        (state_dir / "pods").glob(f"{namespace}_{name}_*"), key=lambda p: p.stat().st_mtime
    )
    if not candidates:
        return None
    logs_root = candidates[-1] / "logs"
    if container is None:
        containers = sorted(p.name for p in logs_root.iterdir()) if logs_root.is_dir() else []
        if len(containers) != 1:
            raise ValueError(
                f"pod {namespace}/{name} ran containers {containers}; say which one you want"
            )
        container = containers[0]
    instances = sorted(
        (logs_root / container).glob("*.log"), key=lambda p: int(p.name.removesuffix(".log"))
    )
    wanted = -2 if previous else -1
    if len(instances) < abs(wanted):
        what = "a previous instance" if previous else "any output file"
        raise FileNotFoundError(f"container {container!r} of pod {namespace}/{name} has no {what}")
    return instances[wanted].read_text(errors="replace")
