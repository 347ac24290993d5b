"""Fixtures for SDK tests; the helpers they use live in ``pods.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pods import Pod, start_pod


@pytest.fixture
def pods() -> Iterator[Callable[..., Pod]]:
    """Start ``pgsched <command>`` children; any still running at the end are killed."""
    started: list[Pod] = []

    def start(command: str, env: dict[str, str], *flags: str) -> Pod:
        pod = start_pod(command, env, *flags)
        started.append(pod)
        return pod

    yield start
    for pod in started:
        pod.kill()
