"""An operator facing a fleet of ScheduledJobs at once (issue 17 #2), at a scale of seconds.

The fleet is created before the operator starts, as after an outage or on installing
pgsched into a cluster that already has them: on start-up kopf sees every one at once.
The cluster is host-only (``ControlPlane(host_only=True)``: no node is needed for idle
ScheduledJobs, so these tests never wait for the machine's node lock). The full-scale
curves are ``python -m bench fleet``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import fleet, footprint
from bench.kube import CRDS
from devenv.adminclient import AdminClient
from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess, start_operator
from plugins.cluster import require_binaries

pytestmark = pytest.mark.own_cluster

FLEET = 600
# What a bounded sync may add, whatever the fleet: kopf's workers, connections, one
# listed chunk (at 10,000 ScheduledJobs the operator stays within 25 MiB of an empty one).
MEMORY_ALLOWANCE_MIB = 60


@pytest.fixture(scope="module")
def host_cluster() -> Iterator[ControlPlane]:
    with ControlPlane(binaries=require_binaries(), host_only=True) as control_plane:
        control_plane.apply_crds(CRDS)
        yield control_plane


@pytest.fixture(scope="module")
def admin(host_cluster: ControlPlane) -> AdminClient:
    return AdminClient.from_kubeconfig(host_cluster.kubeconfig)


def start(cluster: ControlPlane, dsn: str, namespace: str, log: Path) -> OperatorProcess:
    return start_operator(
        kubeconfig=cluster.kubeconfig,
        dsn=dsn,
        namespaces=namespace,
        log_path=log,
        PGSCHED_API_QPS="500",
        PGSCHED_API_BURST="1000",
    )


def test_operator_syncs_a_fleet_it_finds_on_start_in_bounded_memory_without_failed_requests(
    host_cluster: ControlPlane, admin: AdminClient, dsn: str, tmp_path: Path
) -> None:
    """Unbounded, kopf handled every object at once on start-up: a worker, a TLS
    connection (its pool has no limit) and a parsed body for each, memory in proportion
    to the fleet (313 MiB for 1,000 where 99 MiB do), until the API server reset the
    connections and every patch was retried with backoff."""
    host_cluster.kubectl("create", "namespace", "fleet-empty")
    empty = start(host_cluster, dsn, "fleet-empty", tmp_path / "empty.log")
    time.sleep(5)
    baseline = footprint.rss_mib(empty.pid)
    empty.stop()
    host_cluster.kubectl("create", "namespace", "fleet-start")
    fleet.create_fleet(admin, "fleet-start", FLEET)
    peak = fleet.PeakRss()
    operator = start(host_cluster, dsn, "fleet-start", tmp_path / "operator.log")
    try:
        peak.follow(operator.pid)
        fleet.wait_for_sync(admin, dsn, "fleet-start", FLEET, timeout=300)
    finally:
        highest = peak.stop()
        operator.stop()
    failed = [line for line in operator.log().splitlines() if "failed; will retry" in line]
    assert not failed, f"{len(failed)} API requests failed while syncing, e.g. {failed[:3]}"
    assert highest < baseline + MEMORY_ALLOWANCE_MIB, (
        f"syncing {FLEET} ScheduledJobs took the operator to {highest:.0f} MiB,"
        f" from {baseline:.0f} MiB with none"
    )
