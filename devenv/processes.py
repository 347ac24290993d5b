"""Child processes that are always cleaned up, plus free loopback ports.

Every process the launcher starts gets its own session (so its whole process group can be
signalled), a log file, and an entry in a module-level registry. The registry is emptied at
interpreter exit and on SIGTERM/SIGHUP, so a failed or interrupted test run never leaves an
etcd or kube-apiserver behind holding ports. Processes are only ever signalled by the PID we
started, never looked up by name.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

_registry: list[ManagedProcess] = []  # in start order
_registry_lock = threading.Lock()


class ManagedProcess:
    """One started child process with its log file; stop() signals its process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [os.fspath(arg) for arg in argv]
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        with _registry_lock:
            _registry.append(self)

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def check_alive(self) -> None:
        """Raise with the tail of the log if the process has exited."""
        code = self.returncode()
        if code is not None:
            raise RuntimeError(
                f"{self.name} exited with code {code}; last log lines ({self.log_path}):\n"
                + log_tail(self.log_path)
            )

    def stop(self, *, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap the child."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            _signal_group(popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=grace)
        # The leader may be gone while children it spawned linger in the group.
        _signal_group(popen.pid, signal.SIGKILL)
        popen.wait()
        with _registry_lock:
            if self in _registry:
                _registry.remove(self)

    def rss_bytes(self) -> int:
        """Resident set size of the process (not its children), from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def stop_all() -> None:
    """Stop every registered process, newest first (nodes before the API server before etcd)."""
    with _registry_lock:
        processes = list(reversed(_registry))
    for process in processes:
        process.stop(grace=5.0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, which is
    also where every outgoing connection takes its source port: between this call and the
    component's own bind, a client connecting anywhere could take it (seen in CI, two
    suites at once: kube-controller-manager "bind: address already in use"). A port below
    the range is only ever taken by a listener.

    Test processes running at once draw from disjoint residue classes of ports, so a port
    one used and gave back is never another's: ``make test`` runs two pytest phases side by
    side (``PGSCHED_PORT_SHARE=k/n``, phase k of n; seen in CI: a chaos replica's health port
    taken by the other phase between the choice and the bind), and pytest-xdist workers
    split their phase's class again. Relays into the shared cluster's node are keyed by port
    (``ControlPlane.expose_postgres``), and one worker's relay may outlive the server it was
    made for. Within a process, a port handed out is not handed out again for
    ``REUSE_AFTER_SECONDS``: two components given ports before either binds get two."""
    low = _ephemeral_low()
    share, shares = _port_share()
    now = time.monotonic()
    with _handed_lock:
        for port, given in list(_handed.items()):
            if now - given > REUSE_AFTER_SECONDS:
                del _handed[port]
        for _ in range(200):
            port = random.randrange(max(1024, low - 12000), low)
            port -= (port - share) % shares
            if port in _handed:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _handed[port] = now
            return port
    raise RuntimeError(f"no free TCP port on {host} below {low} in 200 tries")


REUSE_AFTER_SECONDS = 120.0
_handed: dict[int, float] = {}
_handed_lock = threading.Lock()


def _port_share() -> tuple[int, int]:
    """(this process's residue class, the number of classes): the phase's
    (``PGSCHED_PORT_SHARE``), split among its pytest-xdist workers; (0, 1) outside both."""
    phase, phases = _fraction(os.environ.get("PGSCHED_PORT_SHARE", ""))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        workers = int(count)
        return phase + phases * (int(worker[2:]) % workers), phases * workers
    return phase, phases


def _fraction(text: str) -> tuple[int, int]:
    """``"k/n"`` as (k, n) when 0 <= k < n; (0, 1) otherwise."""
    k, _, n = text.partition("/")
    if k.isdigit() and n.isdigit() and int(k) < int(n):
        return int(k), int(n)
    return 0, 1


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def wait_port(host: str, port: int, *, timeout: float, process: ManagedProcess) -> None:
    """Wait until ``host:port`` accepts connections, failing fast if ``process`` died."""
    deadline = time.monotonic() + timeout
    while True:
        process.check_alive()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((host, port)) == 0:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{process.name} did not listen on {host}:{port} in {timeout}s")
        time.sleep(0.05)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    stop_all()  # first, so nothing survives even if the unwinding below is cut short
    # Then unwind like Ctrl-C: context managers remove work directories, pytest tears down
    # its fixtures and reports the run as interrupted.
    raise KeyboardInterrupt(f"received signal {signal.Signals(signum).name}")


def install_signal_handlers() -> None:
    """Treat SIGTERM/SIGHUP like Ctrl-C after stopping every registered process, unless the
    program already handles those signals itself.

    Ctrl-C needs nothing: KeyboardInterrupt unwinds context managers and then reaches atexit.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _on_signal)


atexit.register(stop_all)
