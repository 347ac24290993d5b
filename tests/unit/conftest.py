"""Fixtures for unit tests that talk to a scripted run API (``scripted_run_api.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scripted_run_api import ScriptedRunApi, serve


@pytest.fixture
def scripted_api(run_api_tls: Path) -> Iterator[ScriptedRunApi]:
    """A scripted run API with the certificate of ``run_api_tls`` (plugins/runapi.py)."""
    with serve(run_api_tls) as api:
        yield api
