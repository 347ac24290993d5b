"""The run API as job pods reach it (docs/run-api.md): the real server on a test's database.

- ``run_api_tls`` (session): a CA and a certificate it signed for 127.0.0.1 (ca.crt,
  tls.crt, tls.key).
- ``start_run_api(dsn, limits=...)``: start ``pgsched.runapi.serving.Serving`` on a free
  local port for that database (the test's ``dsn``, or a ``private_postgres`` the test
  restarts); stopped at the test's end.
- ``run_api``: one serving the test's own database.
- ``runs_reader``: the Run API's (``kubectl get runs``) reads on the test's database.
- ``scripted_api``: a scripted server (``scripted_run_api.py``) with the same certificate,
  for the client's own behaviour on answers the real server never gives (a stall, an
  endless body).

A handle has the ``url`` and ``ca`` pods are given, ``client(lease)`` (the pods' own
client) and ``request()`` for raw HTTPS requests that show exactly what a pod, or an
attacker, gets back.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devenv import pki
from devenv.processes import free_port
from pgsched.db import connection
from pgsched.engine.lease import Lease
from pgsched.k8s.runs_api.store import RunReader
from pgsched.runapi.limits import Limits
from pgsched.runapi.serving import Serving
from pgsched.runner.runapi_client import RunApiClient
from scripted_run_api import ScriptedRunApi, serve

# Generous limits: the tests that are about limits pass their own.
TEST_LIMITS = Limits(rate=1000.0, burst=1000, concurrency=8, waiters=1000)


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RunApiHandle:
    serving: Serving
    port: int
    ca: str  # PEM
    dsn: str  # the database it serves

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client(self, run_lease: Lease) -> RunApiClient:
        return RunApiClient(self.url, self.ca, run_lease)

    def request(
        self,
        method: str,
        path: str,
        *,
        lease: object | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 40.0,
    ) -> Answer:
        conn = http.client.HTTPSConnection(
            "127.0.0.1",
            self.port,
            context=ssl.create_default_context(cadata=self.ca),
            timeout=timeout,
        )
        sent = dict(headers or {})
        if lease is not None:
            sent["Authorization"] = f"Bearer {lease}"
        if body is not None:
            sent.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            raw = response.read()
            return Answer(
                response.status,
                json.loads(raw) if raw else {},
                {key.lower(): value for key, value in response.getheaders()},
            )
        finally:
            conn.close()


StartRunApi = Callable[..., RunApiHandle]


@pytest.fixture(scope="session")
def run_api_tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pki.serving_tls(
        tmp_path_factory.mktemp("run-api-tls"), ips=["127.0.0.1"], ca_name="pgsched-run-api-ca"
    )


@pytest.fixture
def start_run_api(run_api_tls: Path) -> Iterator[StartRunApi]:
    started: list[RunApiHandle] = []

    def start(dsn: str, *, limits: Limits = TEST_LIMITS) -> RunApiHandle:
        port = free_port()
        serving = Serving(
            dsn=dsn, bind=f"127.0.0.1:{port}", cert_dir=run_api_tls, limits=limits, pool_size=4
        )
        serving.start()
        handle = RunApiHandle(serving, port, (run_api_tls / "ca.crt").read_text(), dsn)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.serving.stop(timeout=10)


@pytest.fixture
def run_api(start_run_api: StartRunApi, dsn: str) -> RunApiHandle:
    return start_run_api(dsn)


@pytest.fixture
def scripted_api(run_api_tls: Path) -> Iterator[ScriptedRunApi]:
    with serve(run_api_tls) as api:
        yield api


@pytest.fixture
def runs_reader(dsn: str) -> Iterator[RunReader]:
    pool = connection.pool(dsn, name="test-runs-api", max_size=2)
    yield RunReader(pool)
    pool.close()
