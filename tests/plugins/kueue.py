"""The real Kueue on the local cluster, for the tests that ask for it (``kueue``).

``kueue`` (per test): a Kueue controller manager built from its Go module (``make kueue``)
running against the session's ``cluster`` (``devenv.kueue``), ready once its webhook
server listens. Its webhooks for Jobs see the test's ``namespace`` only, so it may share
the cluster with other tests (parallel workers): their Jobs never go through it. At the end its objects and webhook configurations are deleted and it stops,
so the tests after it run on a cluster without Kueue. Ask for it before ``operators`` so
the operators stop first (nothing launches Jobs for Kueue while it clears up). Without the
build the test is skipped — failed under ``PGSCHED_REQUIRE_CLUSTER``, as for the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devenv.binaries import MissingBinariesError
from devenv.controlplane import ControlPlane
from devenv.kueue import Kueue
from plugins.cluster import missing


@pytest.fixture
def kueue(
    cluster: ControlPlane, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Kueue]:
    try:
        instance = Kueue(cluster, work_dir=tmp_path / "kueue", namespaces=[namespace])
    except MissingBinariesError as error:
        missing(error, "Kueue")
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"\n----- Kueue log (tail) -----\n{instance.log()}")
