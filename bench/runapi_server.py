"""The run API served for a benchmark: the real ``Serving``, alone in a process of its own.

``python -m bench.runapi_server CONFIG.json`` starts ``pgsched.runapi.serving.Serving`` —
the operator's own object, with its pool, its stops listener and its presence stamps — and
serves until SIGTERM. Nothing else of the operator runs in it, so its CPU
(``/proc/<pid>/stat``) is the run API's alone. :class:`RunApiProcess` is the benchmark's
handle on it.

SIGUSR1 starts a cProfile (of thread CPU time) of the server's event loop thread, where
every request is parsed, checked and answered; SIGUSR2 stops it and writes the stats to
the config's ``profile`` path. Every second the threads' names by native id are written
to ``threads``, so the CPU of each thread can be read from ``/proc/<pid>/task``.
"""

from __future__ import annotations

import cProfile
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devenv import pki
from devenv.processes import ManagedProcess, free_port, log_tail

# What asyncio logs (ERROR) for each task still pending when its event loop is closed.
DESTROYED = "Task was destroyed but it is pending!"


@dataclass(frozen=True)
class Config:
    dsn: str
    port: int
    cert_dir: str
    rate: float
    burst: int
    concurrency: int
    waiters: int
    pool_size: int
    ready: str  # written once the server listens
    threads: str  # {native thread id: name}, written at start and at every profile toggle
    profile: str  # cProfile stats of the event loop thread (SIGUSR1 ... SIGUSR2)


def main(argv: list[str]) -> int:
    from pgsched.runapi.limits import Limits
    from pgsched.runapi.serving import Serving

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    config = Config(**json.loads(Path(argv[0]).read_text()))
    serving = Serving(
        dsn=config.dsn,
        bind=f"127.0.0.1:{config.port}",
        cert_dir=Path(config.cert_dir),
        limits=Limits(config.rate, config.burst, config.concurrency, config.waiters),
        pool_size=config.pool_size,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    serving.start()
    # Not the server's API: the benchmark reaches into it for its event loop alone, to
    # profile the thread that answers every request.
    event_loop = serving._server._loop
    # CPU time of the thread, not wall time: what the loop spends, not what it waits.
    profiler = cProfile.Profile(time.thread_time)

    def profiling(on: bool) -> None:
        _write_threads(config.threads)
        if on:
            event_loop.call_soon_threadsafe(profiler.enable)
        else:

            def dump() -> None:
                profiler.disable()
                profiler.dump_stats(config.profile)

            event_loop.call_soon_threadsafe(dump)

    signal.signal(signal.SIGUSR1, lambda *_: profiling(True))
    signal.signal(signal.SIGUSR2, lambda *_: profiling(False))
    _write_threads(config.threads)
    Path(config.ready).write_text(str(os.getpid()))
    while not stop.wait(1.0):
        _write_threads(config.threads)  # the pools start threads as they need them
        if not serving.alive():
            print("the run API stopped serving on its own", file=sys.stderr, flush=True)
            return 1
    serving.stop(timeout=10)
    return 0


def _write_threads(path: str) -> None:
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    # Written aside and renamed: the benchmark reads this file while the server rewrites
    # it every second, and a reader must never see it truncated.
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps(names))
    os.replace(partial, path)


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU of a process (all its threads), or of one of its threads."""
    stat = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RunApiProcess:
    """The server process: start, its address and CA, its CPU, profiling, stop."""

    def __init__(
        self,
        dsn: str,
        work_dir: Path,
        *,
        rate: float,
        burst: int,
        concurrency: int,
        waiters: int,
        pool_size: int = 4,
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        certs = pki.serving_tls(work_dir / "tls", ips=["127.0.0.1"], ca_name="pgsched-run-api-ca")
        self.ca = (certs / "ca.crt").read_text()
        self.port = free_port()
        self.pool_size = pool_size
        self.config = Config(
            dsn=dsn,
            port=self.port,
            cert_dir=str(certs),
            rate=rate,
            burst=burst,
            concurrency=concurrency,
            waiters=waiters,
            pool_size=pool_size,
            ready=str(work_dir / "ready"),
            threads=str(work_dir / "threads.json"),
            profile=str(work_dir / "server.prof"),
        )
        config_file = work_dir / "config.json"
        config_file.write_text(json.dumps(asdict(self.config)))
        self._process = ManagedProcess(
            "run-api",
            [sys.executable, "-m", "bench.runapi_server", str(config_file)],
            log_path=work_dir / "server.log",
            env={**os.environ, "PYTHONPATH": _pythonpath()},
            cwd=Path(__file__).resolve().parents[1],
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def log_path(self) -> Path:
        return self._process.log_path

    def start(self, timeout: float = 120.0) -> RunApiProcess:
        ready = Path(self.config.ready)
        ready.unlink(missing_ok=True)
        self._process.start()
        deadline = time.monotonic() + timeout
        while not ready.exists():
            self._process.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the run API did not start within {timeout:g}s")
            time.sleep(0.05)
        return self

    def check_alive(self) -> None:
        self._process.check_alive()

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def threads_cpu(self) -> dict[str, float]:
        """CPU seconds by thread name (threads of one name, like the pool's, added up)."""
        names: dict[str, str] = json.loads(Path(self.config.threads).read_text())
        found: dict[str, float] = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            name = names.get(task.name, "other")
            if name.startswith("pgsched-run-api-db"):
                name = "pgsched-run-api-db (pool threads)"
            try:
                found[name] = found.get(name, 0.0) + cpu_seconds(self.pid, int(task.name))
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
        return found

    def profile(self, on: bool) -> None:
        os.kill(self.pid, signal.SIGUSR1 if on else signal.SIGUSR2)

    def profile_stats(self, timeout: float = 10.0) -> Path:
        path = Path(self.config.profile)
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"the run API wrote no profile to {path} within {timeout:.0f} s of SIGUSR2;"
                    f" its log ends:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        return path

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def log_count(self, text: str) -> int:
        """How many lines of the server's log contain ``text``."""
        return sum(text in line for line in self.log_path.read_text(errors="replace").splitlines())

    def stop(self) -> None:
        self._process.stop(grace=15)

    def stop_and_count(self, text: str = DESTROYED) -> int:
        """Stop; how many lines of the log contain ``text`` (by default: requests the
        server's shutdown left pending, each logged by asyncio as an ERROR)."""
        self.stop()
        return self.log_count(text)


def _pythonpath() -> str:
    root = Path(__file__).resolve().parents[1]
    parts = [str(root / "operator"), str(root)]
    existing = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*parts, existing] if existing else parts)


# Where a request's time goes, by the functions that do each part (their cumulative time).
PARTS = {
    "reading and parsing requests (TLS in, HTTP)": ("web_protocol.py", "data_received"),
    "handling: the handler, from routing to the answer": ("web_app.py", "_handle"),
    "the caller's check: lease MAC, namespace lookup, rate": ("server.py", "_caller"),
    "the namespace lookup's hop to the database threads": ("thread.py", "submit"),
    "the lease's MAC (in memory)": ("leases.py", "genuine"),
    "the namespace's rate (token bucket)": ("limits.py", "admit"),
    "metrics (labels, observe)": ("metrics.py", "labels"),
    "answers as JSON responses": ("web_response.py", "json_response"),
    "writing answers (TLS out)": ("sslproto.py", "_process_outgoing"),
}


def profile_summary(profile: Path, count: int = 25) -> dict[str, Any]:
    """The profile's heaviest functions by their own time (cProfile's tottime), and the
    share of the loop's time in each of :data:`PARTS` (cumulative, so parts overlap)."""
    import pstats

    stats = pstats.Stats(str(profile))
    entries = stats.stats.items()  # type: ignore[attr-defined]
    total = sum(entry[2] for _, entry in entries)
    rows = []
    parts = dict.fromkeys(PARTS, 0.0)
    for (file, line, function), entry in entries:
        _calls, primitive, own, cumulative, _callers = entry
        rows.append(
            {
                "function": f"{_short(file)}:{line}({function})",
                "calls": primitive,
                "own s": own,
                "own share": own / total if total else 0.0,
                "cumulative s": cumulative,
            }
        )
        for part, (where, name) in PARTS.items():
            if function == name and file.endswith(where):
                parts[part] += cumulative / total if total else 0.0
    rows.sort(key=lambda row: row["own s"], reverse=True)
    return {"loop_cpu_seconds": total, "parts": parts, "top_own": rows[:count]}


def _short(file: str) -> str:
    for marker in ("site-packages/", "operator/", "lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
