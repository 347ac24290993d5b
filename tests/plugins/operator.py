"""Running the real operator against the local control plane and a real database.

- ``crd`` (session): the CRDs from ``crds/`` (ScheduledJob, ConcurrencyPool, Calendar) applied and
  established.
- ``operators``: start ``pgsched operator`` replicas as real processes (``operators.start()``),
  each with its own health, metrics and run API ports; stopped (and their logs printed on
  failure) at the end of the test. Job pods talk to the replicas' run API through a Service
  of the test's own (``devenv.run_api``): they need no database login and no Secret.
- ``sj``: helpers to apply ScheduledJobs and read runs.
- ``operators_over_standby``: a primary with a streaming standby and operators that follow
  its promotion (the failover tests).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess, start_operator
from devenv.postgres import PostgresServer
from devenv.waiting import wait_for
from pgsched.db import connection
from standby import standby_of

ROOT = Path(__file__).parents[2]
CRDS = ROOT / "crds"
ENDED = ("COMPLETED", "FAILED", "CANCELLED")


@pytest.fixture(scope="session")
def crd(cluster: ControlPlane) -> None:
    cluster.apply_crds(CRDS)


@dataclass
class Operators:
    cluster: ControlPlane
    dsn: str
    namespace: str
    work_dir: Path
    started: list[OperatorProcess] = field(default_factory=list)

    def start(self, *, wait: bool = True, **env: str) -> OperatorProcess:
        index = len(self.started)
        handle = start_operator(
            self.cluster,
            dsn=self.dsn,
            namespaces=self.namespace,
            log_path=self.work_dir / f"operator-{index}.log",
            wait=wait,
            **{
                "PGSCHED_TICK_INTERVAL_SECONDS": "0.2",
                "PGSCHED_PUBLISH_INTERVAL_SECONDS": "0.2",
                # The tests' notification receivers listen on this machine's loopback:
                # allowed, as an administrator allows in-cluster receivers.
                "PGSCHED_NOTIFY_ALLOW": "127.0.0.0/8",
                "PGSCHED_LOG_LEVEL": "DEBUG"
                if os.environ.get("PGSCHED_DEBUG_OPERATOR")
                else "INFO",
                **env,
            },
        )
        self.started.append(handle)
        return handle

    def stop_all(self) -> None:
        for handle in self.started:
            handle.stop()


@pytest.fixture
def operators(
    cluster: ControlPlane,
    crd: None,
    dsn: str,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Operators]:
    group = Operators(cluster, dsn, namespace, tmp_path)
    yield group
    _stop_and_tell(group, request, 6000)


def _stop_and_tell(group: Operators, request: pytest.FixtureRequest, tail: int) -> None:
    """Stop the operators; print the tail of each one's log if the test failed."""
    group.stop_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for index, handle in enumerate(group.started):
            print(f"\n----- operator {index} log (tail) -----\n{handle.log()[-tail:]}")


@dataclass
class Failover:
    """A primary, its streaming standby, and operators that follow a promotion."""

    primary: PostgresServer
    standby: PostgresServer
    operators: Operators

    def __iter__(self) -> Iterator[Any]:
        """``primary, standby, operators = failover``."""
        return iter((self.primary, self.standby, self.operators))


@pytest.fixture
def operators_over_standby(
    cluster: ControlPlane,
    crd: None,
    namespace: str,
    private_postgres: PostgresServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Failover]:
    """A migrated primary with a streaming standby, and operators (not started) on a
    multi-host read-write DSN, the primary first: once the standby is promoted they find it.
    Stopped and removed after the test."""
    primary = private_postgres
    standby = standby_of(primary)
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres"
        " dbname=postgres target_session_attrs=read-write"
    )
    group = Operators(cluster, dsn, namespace, tmp_path)
    try:
        yield Failover(primary, standby, group)
    finally:
        _stop_and_tell(group, request, 8000)
        standby.cleanup()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@dataclass
class ScheduledJobs:
    """Apply ScheduledJobs in the test namespace and look at them and their runs."""

    cluster: ControlPlane
    namespace: str
    conn: connection.Connection

    def apply(
        self, name: str, spec: dict[str, Any], *, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        manifest = {
            "apiVersion": "pgsched.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": annotations or {},
            },
            "spec": spec,
        }
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
        return self.get(name)

    def get(self, name: str) -> dict[str, Any]:
        output = self.cluster.kubectl("get", "sj", name, "-n", self.namespace, "-o", "json").stdout
        return dict(json.loads(output))

    def condition(self, name: str, kind: str = "Ready") -> dict[str, Any] | None:
        """The ScheduledJob's condition of type ``kind``, if it has one yet."""
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return next((item for item in conditions if item["type"] == kind), None)

    def annotate(self, name: str, key: str, value: str) -> None:
        self.cluster.kubectl(
            "annotate", "sj", name, "-n", self.namespace, f"{key}={value}", "--overwrite"
        )

    def runs(self, name: str) -> list[dict[str, Any]]:
        return self.conn.execute(
            "SELECT r.* FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
            " WHERE d.namespace = %s AND d.name = %s ORDER BY r.id",
            [self.namespace, name],
        ).fetchall()

    def jobs(self, name: str) -> list[dict[str, Any]]:
        output = self.cluster.kubectl(
            "get",
            "jobs",
            "-n",
            self.namespace,
            "-l",
            f"pgsched.dev/scheduledjob={name}",
            "-o",
            "json",
        ).stdout
        return list(json.loads(output)["items"])

    def events(self, name: str) -> list[dict[str, Any]]:
        output = self.cluster.kubectl(
            "get",
            "events",
            "-n",
            self.namespace,
            "--field-selector",
            f"involvedObject.name={name}",
            "-o",
            "json",
        ).stdout
        return list(json.loads(output)["items"])

    def wait_first_run_ended(self, name: str, timeout: float = 90) -> dict[str, Any]:
        """The first run of ``name``, once it is COMPLETED, FAILED or CANCELLED."""
        return self.wait_runs(
            name, lambda found: found and found[0]["status"] in ENDED, timeout, "the run's end"
        )[0]

    def wait_runs(
        self, name: str, predicate: Any, timeout: float = 60, what: str = "runs"
    ) -> list[dict[str, Any]]:
        return wait_for(
            lambda: predicate(self.runs(name)) and self.runs(name),
            timeout,
            describe=lambda: (
                f"{what} of {name}; runs: {[(r['id'], r['status'], r['reason'], r['error']) for r in self.runs(name)]}"
            ),
        )


@pytest.fixture
def sj(cluster: ControlPlane, namespace: str, conn: connection.Connection) -> ScheduledJobs:
    return ScheduledJobs(cluster, namespace, conn)


def busybox(command: str, **pod_spec: Any) -> dict[str, Any]:
    """A jobTemplate running ``sh -c command`` in the local busybox image (``make images``)."""
    return {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}
                    ],
                    **pod_spec,
                }
            }
        }
    }


def now_plus(seconds: float) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def sleep_until_second(second: int) -> None:
    """Sleep until the wall clock's seconds reach ``second`` (to avoid minute boundaries)."""
    while int(time.time()) % 60 != second:
        time.sleep(0.2)
