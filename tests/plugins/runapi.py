"""The run API served for a test: the real server on the test's database, over TLS.

- ``run_api``: a started ``pgsched.runapi.serving.Serving`` on a free local port with a
  certificate of its own CA; ``.url``, ``.ca`` (the PEM pods are given), ``.request()``
  for raw HTTPS requests that show exactly what a pod (or an attacker) gets back.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devenv import pki
from devenv.processes import free_port
from pgsched.runapi.limits import Limits
from pgsched.runapi.serving import Serving

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
    ca: str

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca)

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
            "127.0.0.1", self.port, context=self.context(), timeout=timeout
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


def start_run_api(dsn: str, directory: Path, limits: Limits = TEST_LIMITS) -> RunApiHandle:
    certs = pki.serving_tls(directory, ips=["127.0.0.1"], ca_name="pgsched-run-api-ca")
    port = free_port()
    serving = Serving(dsn=dsn, bind=f"127.0.0.1:{port}", cert_dir=certs, limits=limits, pool_size=4)
    serving.start()
    return RunApiHandle(serving, port, (certs / "ca.crt").read_text())


@pytest.fixture
def run_api(dsn: str, tmp_path: Path) -> Iterator[RunApiHandle]:
    handle = start_run_api(dsn, tmp_path / "run-api-tls")
    yield handle
    handle.serving.stop(timeout=10)
