"""One container instance as a local process group.

A container is its main process plus everything it spawns, so the process starts a new
session and is signalled as a group: SIGTERM on stop, SIGKILL after the grace period, and
SIGKILL to the leftovers when the main process exits (a real runtime tears the container
down with its PID 1). Each running group leaves a marker file ``<state>/pgids/<pgid>`` so the
launcher can kill it even if the node process itself was killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devenv.processnode.probes import Prober


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def kill_recorded_groups(markers: Path) -> None:
    """SIGKILL every container process group recorded in ``markers`` (a node that died
    without stopping its pods leaves them behind)."""
    for marker in markers.glob("*") if markers.is_dir() else []:
        pgid = int(marker.name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # A live process with this PID that does not lead its own session is a newcomer
            # that reused the number, not our container. (Linux never reuses a PID while a
            # process group of that number still has members, so a leaderless group is ours.)
            with contextlib.suppress(ProcessLookupError):
                if os.getsid(pgid) != pgid:
                    marker.unlink(missing_ok=True)
                    continue
            os.killpg(pgid, signal.SIGKILL)
        marker.unlink(missing_ok=True)


class ContainerProcess:
    """Started by the constructor; ``exit_code`` is set once the main process has exited."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        markers: Path,
        on_exit: Callable[[], None],
    ) -> None:
        self.started_at = now()
        self.finished_at: datetime | None = None
        self.exit_code: int | None = None
        self.signal: int | None = None
        self._kill_timer: threading.Timer | None = None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self._popen = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._popen.pid
        self._marker = markers / str(self.pid)
        markers.mkdir(parents=True, exist_ok=True)
        self._marker.touch()
        self._on_exit = on_exit
        threading.Thread(target=self._wait, name=f"wait-{self.pid}", daemon=True).start()

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def _wait(self) -> None:
        code = self._popen.wait()
        self.finished_at = now()
        self._signal_group(signal.SIGKILL)
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        self._marker.unlink(missing_ok=True)
        # Like a container runtime: death by signal N is exit code 128 + N.
        self.signal = -code if code < 0 else None
        self.exit_code = 128 - code if code < 0 else code
        self._on_exit()

    def stop(self, grace: float) -> None:
        """SIGTERM the group now and SIGKILL it after ``grace`` seconds (0: immediately)."""
        if not self.running:
            return
        if grace <= 0:
            self._signal_group(signal.SIGKILL)
            return
        self._signal_group(signal.SIGTERM)
        if self._kill_timer is None:
            self._kill_timer = threading.Timer(grace, self._signal_group, [signal.SIGKILL])
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


@dataclass(frozen=True)
class Termination:
    """How one container instance ended, as ``state.terminated`` reports it."""

    exit_code: int
    reason: str
    started_at: datetime
    finished_at: datetime
    message: str = ""
    container_id: str = ""
    signal: int | None = None


class ContainerSlot:
    """Everything the node tracks about one container of a pod across its restarts."""

    def __init__(self, spec: dict[str, Any], kind: str) -> None:
        self.spec = spec
        self.kind = kind  # "init", "sidecar" (restartable init container) or "main"
        self.name = str(spec["name"])
        self.instances = 0
        self.process: ContainerProcess | None = None
        self.termination: Termination | None = None  # of the current instance, once it ended
        self.last_termination: Termination | None = None  # of the instance before
        self.waiting_reason = "PodInitializing" if kind == "main" else "ContainerCreating"
        self.waiting_message = ""
        self.not_before = 0.0  # monotonic time before which a restart must not happen
        self.ready = False
        self.started = threading.Event()  # the startup probe (if any) passed
        self.probers: list[Prober] = []

    @property
    def restart_count(self) -> int:
        return max(self.instances - 1, 0)

    @property
    def running(self) -> bool:
        """Started and not yet collected. The pod's thread alone decides state, so a process
        that exits between two steps counts as running until ``collect_exit`` sees it."""
        return self.process is not None

    @property
    def succeeded(self) -> bool:
        return self.termination is not None and self.termination.exit_code == 0

    def collect_exit(self) -> Termination | None:
        """If the current process has exited since the last call, record and return that."""
        process = self.process
        if process is None or process.running:
            return None
        assert process.exit_code is not None and process.finished_at is not None
        self.termination = Termination(
            exit_code=process.exit_code,
            reason="Completed" if process.exit_code == 0 else "Error",
            started_at=process.started_at,
            finished_at=process.finished_at,
            container_id=f"devenv://{process.pid}",
            signal=process.signal,
        )
        self.process = None
        self.stop_probers()
        self.ready = False
        self.started.clear()
        return self.termination

    def stop_probers(self) -> None:
        for prober in self.probers:
            prober.stop.set()
        self.probers = []
