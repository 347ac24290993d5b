"""Finding the processes to hurt, and hurting them: the fault injector's toolbox.

Everything here acts on real processes and real sessions:

- the tick leader is whoever holds the leader's advisory lock *right now* (``pg_locks``);
  its client process is found from the backend's ``client_port`` and the socket inodes in
  ``/proc`` — operator replicas all call their tick session ``pgsched-tick``, so the
  application name cannot tell them apart;
- job processes are found by name (``job-<run id>``, the database variant's job host) or
  by the ``PGSCHED_RUN_ID`` in their environment (containers of the namespace's pods on the
  local node, found by their pod cgroup);
- signals: ``SIGKILL`` for crashes, ``SIGSTOP``/``SIGCONT`` for pauses (a GC pause, a
  frozen container, a VM migration), with every paused process resumed at the end.

``FaultPlan`` decides what comes next: every kind once, in a seeded random order, then
weighted random draws — so even a short run injects each kind at least once.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pgsched.db.connection import Connection
from pgsched.engine import leader

_PROC = Path("/proc")


class HarnessError(Exception):
    """A fault that broke the system under test and could not finish injecting itself
    (a primary killed whose standby would not promote). What follows would judge the
    harness, not pgsched, so the run stops here with this error instead of a verdict.
    Deliberately not a RuntimeError: the driver retries those as faults not injected."""


def send(pid: int, signum: int) -> bool:
    """Signal a process; False if it is already gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


class Freezer:
    """SIGSTOP now, SIGCONT later (on a timer), and SIGCONT everything on ``thaw_all``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frozen: dict[int, threading.Timer] = {}

    def freeze(self, pid: int, seconds: float) -> bool:
        if not send(pid, signal.SIGSTOP):
            return False
        timer = threading.Timer(seconds, self.thaw, args=(pid,))
        timer.daemon = True
        with self._lock:
            previous = self._frozen.pop(pid, None)
            self._frozen[pid] = timer
        if previous is not None:
            previous.cancel()
        timer.start()
        return True

    def thaw(self, pid: int) -> None:
        with self._lock:
            timer = self._frozen.pop(pid, None)
        if timer is not None:
            timer.cancel()
        send(pid, signal.SIGCONT)

    def frozen(self) -> set[int]:
        with self._lock:
            return set(self._frozen)

    def thaw_all(self) -> None:
        for pid in self.frozen():
            self.thaw(pid)


# The claim and the launch record: a leader whose last statement is one of these has
# claimed runs and is launching them (the window where a crash leaves runs RUNNING with
# nothing running them).
_LAUNCHING = ("%lease_token = gen_random_uuid()%", "%SET k8s_job_name%")


def tick_leader_backend(
    admin: Connection, *, launching: bool = False, lock_name: str = leader.DEFAULT_LOCK_NAME
) -> int | None:
    """The backend pid holding the tick leader lock, if a tick is in progress (and, with
    ``launching``, only if that tick is between its claim and its last launch)."""
    row = admin.execute(
        "SELECT a.pid FROM pgsched.leader_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.holder_pid AND a.backend_start = l.holder_started"
        " WHERE l.name = %(lock)s AND l.held_until >= clock_timestamp()"
        " AND (NOT %(launching)s OR a.query LIKE ANY(%(patterns)s))",
        {"lock": lock_name, "launching": launching, "patterns": list(_LAUNCHING)},
    ).fetchone()
    return int(row["pid"]) if row else None


def catch_tick_leader(
    admin: Connection, *, launching: bool = False, timeout: float = 5.0
) -> int | None:
    """Poll until some replica is mid-tick (or launching); its backend pid, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        backend = tick_leader_backend(admin, launching=launching)
        if backend is not None:
            return backend
        time.sleep(0.002)
    return None


def client_process(admin: Connection, backend: int, candidates: Iterable[int]) -> int | None:
    """Which of ``candidates`` (pids) is the client of the backend ``backend``."""
    row = admin.execute(
        "SELECT client_port, inet_server_port() AS server_port FROM pg_stat_activity"
        " WHERE pid = %s",
        [backend],
    ).fetchone()
    if row is None or row["client_port"] is None:
        return None
    inode = _socket_inode(local_port=row["client_port"], remote_port=row["server_port"])
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in candidates:
        with contextlib.suppress(OSError):
            for fd in (_PROC / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == target:
                        return pid
    return None


def _socket_inode(*, local_port: int, remote_port: int) -> int | None:
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (_PROC / "net" / table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if (
                    int(local.rsplit(":", 1)[1], 16) == local_port
                    and int(remote.rsplit(":", 1)[1], 16) == remote_port
                ):
                    return int(inode)
    return None


def sessions(admin: Connection, application_names: Iterable[str]) -> list[int]:
    """Backend pids of the sessions with these application names (prefix match with %)."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE ANY(%s)"
        " AND pid <> pg_backend_pid()",
        [list(application_names)],
    ).fetchall()
    return [int(row["pid"]) for row in rows]


def terminate(admin: Connection, backends: Iterable[int]) -> int:
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) AS done FROM unnest(%s::int[]) AS pid",
        [list(backends)],
    ).fetchall()
    return sum(1 for row in rows if row["done"])


def _process_table() -> dict[int, tuple[str, int]]:
    """pid → (name, parent pid) of every process, from ``/proc/<pid>/stat``."""
    table = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            stat = (entry / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            table[int(entry.name)] = (name, int(stat[stat.rindex(")") + 2 :].split()[1]))
    return table


def named_children(parent: int, prefix: str) -> dict[int, str]:
    """Children of ``parent`` whose name (``comm``) starts with ``prefix``: pid → name."""
    return {
        pid: name
        for pid, (name, parent_pid) in _process_table().items()
        if parent_pid == parent and name.startswith(prefix)
    }


def processes_by_run(pod_uids: Iterable[str]) -> dict[int, list[int]]:
    """Processes of the containers of the given pods (real containers on the local node,
    found by their ``kubepods/.../pod<uid>`` cgroup), grouped by the ``PGSCHED_RUN_ID`` in
    their environment (every container of a run's pod has it). Other pods are left alone."""
    markers = [f"/pod{uid}/".encode() for uid in pod_uids]
    found: dict[int, list[int]] = {}
    if not markers:
        return found
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cgroups = (entry / "cgroup").read_bytes()
            if not any(marker in cgroups for marker in markers):
                continue
            environment = dict(
                item.split(b"=", 1)
                for item in (entry / "environ").read_bytes().split(b"\0")
                if b"=" in item
            )
            run_id = environment.get(b"PGSCHED_RUN_ID")
            if run_id is not None:
                found.setdefault(int(run_id), []).append(int(entry.name))
    return found


@dataclass
class FaultLog:
    """What was injected, when (seconds since the start) and to whom."""

    started: float = field(default_factory=time.monotonic)
    records: list[dict[str, object]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, detail: str) -> None:
        with self._lock:
            self.records.append(
                {
                    "kind": kind,
                    "at": round(time.monotonic() - self.started, 2),
                    "utc": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "detail": detail,
                }
            )

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(str(record["kind"]) for record in self.records))


class FaultPlan:
    """Every kind once (shuffled; the ``last`` kinds after all others), then weighted
    random draws."""

    def __init__(
        self, rng: random.Random, weights: dict[str, float], *, last: tuple[str, ...] = ()
    ) -> None:
        self._rng = rng
        self._weights = weights
        self._first = [kind for kind in weights if kind not in last]
        rng.shuffle(self._first)
        self._last = [kind for kind in last if kind in weights]
        self._first += self._last

    def next(self) -> str:
        if self._first:
            return self._first.pop(0)
        kinds = list(self._weights)
        return self._rng.choices(kinds, weights=[self._weights[k] for k in kinds])[0]

    def in_order(self, kinds: list[str]) -> list[str]:
        """``kinds`` in the order the plan would inject them: those still owed first, in
        its order (the ``last`` kinds in theirs), then the rest as given."""
        owed = [kind for kind in self._first if kind in kinds]
        return owed + [kind for kind in kinds if kind not in owed]

    def again(self, kind: str) -> None:
        """``kind`` had nothing to act on (no job running, no tick caught): owe it (still
        before the ``last`` kinds not injected yet)."""
        if kind not in self._first:
            pending_last = [i for i, k in enumerate(self._first) if k in self._last]
            self._first.insert(pending_last[0] if pending_last else len(self._first), kind)
