"""Real runner processes for SDK tests: claim a run, start ``pgsched run`` or
``pgsched heartbeat`` as a subprocess with the pod's environment contract, watch its log.
(The ``pods`` fixture in ``conftest.py`` starts them and kills leftovers.)

The job modules are the ones users would ship: ``examples/pgsched_examples`` and, for
behaviours the examples do not exercise (raising chosen exceptions, pausing), the kinds in
``sdk_test_jobs.py`` next to this file. Both directories go on the child's PYTHONPATH,
after the directory of the pgsched package the tests import.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgsched
from factories import RecordingLauncher, define
from pgsched.db.connection import Connection
from pgsched.engine import dispatch, runs
from pgsched.engine.models import Definition, Run
from plugins.runapi import RunApiHandle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = Path(__file__).resolve().parent
# The pgsched this test process imports (a checkout's own, not whatever the venv installed),
# so the child processes run the code under test.
PACKAGE_ROOT = Path(pgsched.__file__).resolve().parents[1]
EXAMPLE_MODULES = "pgsched_examples.ledger_import,pgsched_examples.ledger_report"
TEST_MODULES = "sdk_test_jobs"


def wait_for(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_pod(command: str, env: dict[str, str], *flags: str) -> Pod:
    return Pod([sys.executable, "-m", "pgsched.cli.main", command, *flags], env)


class Pod:
    """A ``pgsched`` child process with its combined output collected line by line."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, *, timeout: float = 20.0) -> str:
        regex = re.compile(pattern)

        def found() -> str | None:
            if self.process.poll() is not None and not self._reader.is_alive():
                raise AssertionError(
                    f"the process exited ({self.process.returncode}) before logging"
                    f" {pattern!r}:\n{self.output}"
                )
            return next((line for line in self.lines if regex.search(line)), None)

        try:
            return wait_for(found, timeout=timeout, what=f"a line matching {pattern!r}")  # type: ignore[no-any-return]
        except AssertionError as error:
            raise AssertionError(f"{error}; the output so far:\n{self.output}") from None

    def wait(self, timeout: float = 60.0) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(
                f"the process did not exit in {timeout}s:\n{self.output}"
            ) from None
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def contract(run_api: RunApiHandle, run: Run, **extra: str) -> dict[str, str]:
    """The environment the operator gives a job pod."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PGSCHED_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(EXAMPLES), str(HERE)]),
        PYTHONUNBUFFERED="1",
        PGSCHED_RUN_ID=str(run.id),
        PGSCHED_LEASE_TOKEN=str(run.lease_token),
        PGSCHED_ATTEMPT=str(run.attempt),
        PGSCHED_RUN_API_URL=run_api.url,
        PGSCHED_RUN_API_CA=run_api.ca,
        # The example kinds keep their data in a database their jobTemplate names
        # (examples/ledger-import.yaml): here the test's, which the run API serves.
        PGSCHED_EXAMPLES_DSN=run_api.dsn,
        PGSCHED_HEARTBEAT_INTERVAL_SECONDS="0.1",
    )
    env.update(extra)
    return env


def start_job(
    pods: Callable[..., Pod],
    run_api: RunApiHandle,
    run: Run,
    kind: str,
    args: dict[str, Any] | None = None,
    *,
    modules: str = EXAMPLE_MODULES,
    **extra: str,
) -> Pod:
    env = contract(
        run_api,
        run,
        PGSCHED_JOB_KIND=kind,
        PGSCHED_JOB_ARGS=json.dumps(args or {}),
        PGSCHED_JOB_MODULES=modules,
        **extra,
    )
    return pods("run", env)


def claim(conn: Connection, job: Definition, *, token: str = "once") -> Run:
    """Queue a manual run of ``job`` and claim it, as the operator's dispatch would."""
    runs.run_now(conn, job.id, token=token)
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[job.id]).claimed
    return run


def run_row(conn: Connection, run: Run) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM pgsched.job_runs WHERE id = %s", [run.id]).fetchone()
    assert row is not None
    return row


def sdk_job(conn: Connection, name: str = "job", **spec: Any) -> Definition:
    """A definition whose runs are SDK jobs (the schedule never fires by itself)."""
    return define(conn, name, schedule="0 0 1 1 *", **spec)
