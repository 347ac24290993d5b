"""The database variant: three engine replicas, simulated job processes, real Postgres.

Each replica is ``python -m chaos.replica`` — the real ``Ticker`` with leader election —
launching into the job host (``python -m chaos.jobhost``), which forks one process per
run; jobs heartbeat and finish through the real fenced lease calls. The workload is
``workload.create_definitions`` plus a stream of run-now requests and cancels.

Launch evidence for I1 is the replicas' shared launch log: a run launched twice (by two
claimers, or by one claimer twice) shows up there even if every database row looks fine.

Planted bugs (self-tests only), ``config.planted``:

- ``unlocked-dispatch``: replicas all lead and dispatch without the advisory locks → I2
  (the unlocked claim is created in the test database here, ``bench/planted.py``);
- ``unfenced-finish``: jobs ignore a lost lease and finish with an unfenced UPDATE → I4;
- ``forgetful-finish``: an acknowledged COMPLETED is rolled back, as an asynchronous
  failover would lose it → I8 (the job host's execution log still shows it).
- ``poolless-dispatch``: the claim keeps its locks and caps but ignores the concurrency
  pools' limits (``planted.install_poolless_claim``) → I9.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import invariants
from bench import planted
from chaos import faults, jobhost, workload
from chaos.config import ROOT, ChaosConfig
from chaos.driver import ChaosDriver, Fault
from chaos.replicated import ReplicatedPostgres
from devenv.postgres import PostgresServer
from pgsched.db import connection
from pgsched.db.connection import Connection
from pgsched.engine import definitions
from pgsched.k8s import names

PLANTED = ("unlocked-dispatch", "unfenced-finish", "forgetful-finish", "poolless-dispatch")


def _environment() -> dict[str, str]:
    paths = [str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


class DatabaseChaos(ChaosDriver):
    variant = "db"
    replica_sessions = ("chaos-replica-%",)

    def __init__(
        self,
        config: ChaosConfig,
        server: PostgresServer | ReplicatedPostgres,
        work_dir: Path,
        *,
        definitions: int = 240,
        requests_per_second: float = 1.5,
        job_seconds: tuple[float, float] = (1.0, 10.0),
        tick_interval: float = 0.2,
        backlog: int = 0,
        pooled_share: float = 0.1,
    ) -> None:
        super().__init__(config, server, work_dir)
        if config.planted not in (None, *PLANTED):
            raise ValueError(f"unknown planted bug {config.planted!r} (one of {PLANTED})")
        self._definitions = definitions
        self._per_second = requests_per_second
        self._job_seconds = job_seconds
        self._tick_interval = tick_interval
        self._backlog = backlog
        self._pooled_share = pooled_share
        # A short path: AF_UNIX socket paths are limited to 107 bytes.
        self._socket_dir = Path(tempfile.mkdtemp(prefix="chaos-"))
        self._socket = self._socket_dir / "jobhost.sock"
        self._launch_log = work_dir / "launches.jsonl"
        self._exec_log = work_dir / "executions.jsonl"
        self._jobhost: subprocess.Popen[bytes] | None = None
        self._requests: workload.Requests | None = None
        self._definition_ids: list[Any] = []

    def prepare(self) -> None:
        with connection.connect(self.dsn, application_name="chaos-setup") as conn:
            invariants.install_run_audit(conn)
            if self.config.planted == "unlocked-dispatch":
                planted.install_unlocked_claim(conn)
            elif self.config.planted == "poolless-dispatch":
                planted.install_poolless_claim(conn)
            self._definition_ids = workload.create_definitions(
                conn,
                random.Random(f"{self.config.seed}:definitions"),
                self._definitions,
                pooled_share=self._pooled_share,
            )
            workload.enqueue_backlog(conn, self._definition_ids, self._backlog)
        self._launch_log.touch()
        command = [
            sys.executable,
            "-m",
            "chaos.jobhost",
            "--socket",
            str(self._socket),
            "--dsn",
            self.dsn,
            "--seed",
            str(self.config.seed),
            "--shortest",
            str(self._job_seconds[0]),
            "--longest",
            str(self._job_seconds[1]),
            "--exec-log",
            str(self._exec_log),
        ]
        if self.config.planted == "unfenced-finish":
            command.append("--unfenced")
        if self.config.planted == "forgetful-finish":
            command.append("--forgetful")
        self._jobhost = self._spawn(command, "jobhost.log")
        deadline = time.monotonic() + 30
        while not self._socket.exists():
            if self._jobhost.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job host did not start; see {self.work_dir}/jobhost.log")
            time.sleep(0.05)

    def _spawn(self, command: list[str], log_name: str) -> subprocess.Popen[bytes]:
        with (self.work_dir / log_name).open("ab") as log_file:
            return subprocess.Popen(
                command, env=_environment(), cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT
            )

    def start_replica(self, index: int) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "chaos.replica",
            "--dsn",
            self.dsn,
            "--index",
            str(index),
            "--socket",
            str(self._socket),
            "--launch-log",
            str(self._launch_log),
            "--interval",
            str(self._tick_interval),
        ]
        if self.config.planted == "unlocked-dispatch":
            command += ["--leaderless", "--unlocked-dispatch"]
        elif self.config.planted == "poolless-dispatch":
            # The same routing to the planted copy of the claim: here the poolless one.
            command += ["--unlocked-dispatch"]
        return self._spawn(command, f"replica-{index}.log")

    def start_load(self) -> None:
        self._requests = workload.Requests(
            self.dsn,
            self._definition_ids,
            random.Random(f"{self.config.seed}:requests"),
            per_second=self._per_second,
        )
        self._requests.start()

    def stop_load(self) -> None:
        if self._requests is not None and self._requests.is_alive():
            self._requests.stop()

    def quiesce(self) -> None:
        def suspend(conn: Connection) -> None:
            for definition_id in self._definition_ids:
                definitions.set_suspended(conn, definition_id, True)

        self.patiently(suspend)

    def job_processes(self) -> dict[int, list[int]]:
        if self._jobhost is None:
            return {}
        children = faults.named_children(self._jobhost.pid, jobhost.COMM_PREFIX)
        return {
            int(name.removeprefix(jobhost.COMM_PREFIX)): [pid] for pid, name in children.items()
        }

    def launches(self, conn: Connection) -> list[tuple[int, str]]:
        lines = self._launch_log.read_text().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        return [(record["run_id"], names.lease_fingerprint(record["lease"])) for record in records]

    def variant_faults(self) -> dict[str, tuple[float, Fault]]:
        if isinstance(self.server, ReplicatedPostgres):
            pair = self.server
            return {"failover": (3.0, lambda rng: pair.failover())}
        return {}

    def variant_checks(self, conn: Connection) -> dict[str, list[str]]:
        """I3, nothing lost: every run-now request the database acknowledged has its run."""
        asked = self._requests.acknowledged if self._requests else []
        found = {
            (row["definition_id"], row["request_token"])
            for row in conn.execute(
                "SELECT definition_id, request_token FROM pgsched.job_runs"
                " WHERE request_token = ANY(%s)",
                [[token for _, token in asked]],
            )
        }
        return {
            "I3": [
                f"run-now request {token} of definition {definition_id} was acknowledged,"
                " and no run of it exists"
                for definition_id, token in asked
                if (definition_id, token) not in found
            ]
        }

    def executions(self) -> list[dict[str, Any]]:
        if not self._exec_log.exists():
            return []
        lines = self._exec_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def variant_stats(self, conn: Connection) -> dict[str, Any]:
        requests = self._requests
        return {
            "definitions": self._definitions,
            "run-now requests": requests.requested if requests else 0,
            "requests re-sent with the same token": requests.repeated if requests else 0,
            "cancel requests": requests.cancels if requests else 0,
        }

    def teardown(self) -> None:
        if self._jobhost is not None:
            leftovers = faults.named_children(self._jobhost.pid, jobhost.COMM_PREFIX)
            self._jobhost.terminate()
            self._jobhost.wait(timeout=10)
            for pid in leftovers:
                faults.send(pid, signal.SIGKILL)
        shutil.rmtree(self._socket_dir, ignore_errors=True)
