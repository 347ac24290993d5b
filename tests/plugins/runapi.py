"""The run API as job pods reach it (docs/run-api.md): its address and the CA to trust.

``run_api_tls`` is a CA and the server's certificate for 127.0.0.1. ``run_api`` serves the
test's own database (``dsn``); ``start_run_api(dsn)`` serves another, such as a
``private_postgres`` the test restarts. The server (``pgsched.runapi``) comes to main apart
from its client: until these fixtures start it, the tests that need it are skipped, saying
so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from devenv import pki
from pgsched.engine.lease import Lease
from pgsched.runner.runapi_client import RunApiClient


@dataclass(frozen=True)
class RunApiAddress:
    url: str
    ca: str  # PEM
    dsn: str  # the database it serves

    def client(self, run_lease: Lease) -> RunApiClient:
        return RunApiClient(self.url, self.ca, run_lease)


@pytest.fixture(scope="session")
def run_api_tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a certificate it signed for 127.0.0.1: ca.crt, tls.crt, tls.key."""
    return pki.webhook_tls(tmp_path_factory.mktemp("run-api-tls"), ip="127.0.0.1")


@pytest.fixture
def start_run_api() -> Callable[[str], RunApiAddress]:
    def start(dsn: str) -> RunApiAddress:
        pytest.skip("needs the run API server (pgsched.runapi): tests/plugins/runapi.py")

    return start


@pytest.fixture
def run_api(start_run_api: Callable[[str], RunApiAddress], dsn: str) -> RunApiAddress:
    return start_run_api(dsn)
