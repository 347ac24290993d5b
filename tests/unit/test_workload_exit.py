"""The sidecar sees the workload end in a pod that shares its process namespace
(runner/workload_exit.py), here against a /proc-shaped directory the test writes: a
process is a directory with ``stat`` and ``cgroup``. The real thing runs on the real node in
tests/cluster/test_replace_latency.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pgsched.runner import workload_exit

OWN = "0::/\n"


def add(proc: Path, pid: int, cgroup: str, state: str = "S") -> None:
    assert pid not in (1, os.getpid())
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(f"{pid} (sh (x)) {state} 1 1 1\n")
    (proc / str(pid) / "cgroup").write_text(cgroup)


def remove(proc: Path, pid: int) -> None:
    for name in ("stat", "cgroup"):
        (proc / str(pid) / name).unlink()
    (proc / str(pid)).rmdir()


def watching(proc: Path) -> tuple[threading.Event, threading.Event, threading.Thread]:
    ended, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=workload_exit.watch,
        args=(ended.set, stop),
        kwargs={"proc": proc, "poll_seconds": 0.01},
    )
    thread.start()
    time.sleep(0.05)  # the watch has taken its first look
    return ended, stop, thread


def a_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(OWN)
    add(proc, 7, "0::/../earlier-sidecar\n")  # a native sidecar listed before pgsched's
    add(proc, 8, OWN)  # the sidecar's own postStart hook
    return proc


def test_the_end_is_noted_once_the_workloads_processes_are_all_gone(tmp_path):
    proc = a_proc(tmp_path)
    ended, _stop, thread = watching(proc)
    add(proc, 20, "0::/../workload\n")
    add(proc, 21, "0::/../workload\n")
    time.sleep(0.05)
    remove(proc, 20)
    time.sleep(0.05)
    assert not ended.is_set(), "one of the workload's processes still runs"
    add(proc, 22, "0::/../workload\n", state="Z")  # a zombie is not running
    remove(proc, 21)
    thread.join(2)
    assert ended.is_set() and not thread.is_alive()


def test_processes_that_were_there_before_the_sidecar_are_not_the_workload(tmp_path):
    proc = a_proc(tmp_path)
    ended, stop, thread = watching(proc)
    remove(proc, 7)  # the earlier sidecar restarts: not the workload ending
    remove(proc, 8)
    time.sleep(0.1)
    assert not ended.is_set()
    stop.set()  # SIGTERM: the watch gives up without a note
    thread.join(2)
    assert not thread.is_alive() and not ended.is_set()
