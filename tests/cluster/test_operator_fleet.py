"""An operator facing a fleet of ScheduledJobs at once (issue 17 #2), at a scale of seconds.

The fleet is created before the operator starts, as after an outage or on installing
pgsched into a cluster that already has them: on start-up the operator lists every one.
The cluster is host-only (``ControlPlane(host_only=True)``: no node is needed for idle
ScheduledJobs, so these tests never wait for the machine's node lock). The full-scale
curves are ``python -m bench fleet``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import fleet, footprint
from devenv.adminclient import AdminClient
from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess, start_operator
from devenv.waiting import wait_for
from pgsched.db import connection
from plugins.cluster import host_only_cluster

pytestmark = pytest.mark.api_only

FLEET = 600
# What a bounded sync may add, whatever the fleet: one listed chunk, the sync queue's
# bodies, a write record per ScheduledJob still waiting for the API budget.
MEMORY_ALLOWANCE_MIB = 60


@pytest.fixture(scope="module")
def host_cluster() -> Iterator[ControlPlane]:
    with host_only_cluster() as control_plane:
        yield control_plane


@pytest.fixture(scope="module")
def admin(host_cluster: ControlPlane) -> AdminClient:
    return AdminClient.from_kubeconfig(host_cluster.kubeconfig)


def start(cluster: ControlPlane, dsn: str, namespace: str, log: Path) -> OperatorProcess:
    return start_operator(
        cluster,
        dsn=dsn,
        namespaces=namespace,
        log_path=log,
        PGSCHED_API_QPS="500",
        PGSCHED_API_BURST="1000",
    )


def test_operator_syncs_a_fleet_it_finds_on_start_in_bounded_memory_without_failed_requests(
    host_cluster: ControlPlane, admin: AdminClient, dsn: str, tmp_path: Path
) -> None:
    """A framework that queues every listed object with its body (kopf, before 0.3)
    took 313 MiB for 1,000 where 99 MiB do; unbounded, it also opened a TLS connection per
    concurrent patch until the API server reset them and every patch was retried."""
    host_cluster.kubectl("create", "namespace", "fleet-empty")
    empty = start(host_cluster, dsn, "fleet-empty", tmp_path / "empty.log")
    time.sleep(5)
    baseline = footprint.rss_mib(empty.pid)
    empty.stop()
    host_cluster.kubectl("create", "namespace", "fleet-start")
    fleet.create_fleet(admin, "fleet-start", FLEET)
    peak = fleet.PeakRss()
    before = fleet.server_requests(admin, successful=True)
    operator = start(host_cluster, dsn, "fleet-start", tmp_path / "operator.log")
    try:
        peak.follow(operator.pid)
        fleet.wait_for_sync(admin, dsn, "fleet-start", FLEET, timeout=300)
        time.sleep(3)  # nothing more is written
        writes = fleet.server_requests(admin, successful=True) - before
    finally:
        highest = peak.stop()
        operator.stop()
    failed = [line for line in operator.log().splitlines() if "failed; will retry" in line]
    assert not failed, f"{len(failed)} API requests failed while syncing, e.g. {failed[:3]}"
    # Three writes per new ScheduledJob: the finalizer, the status and the Scheduled Event.
    assert {key: n for key, n in writes.items() if key[0] in ("POST", "PATCH", "PUT")} == {
        ("PATCH", "scheduledjobs"): 2 * FLEET,
        ("POST", "events"): FLEET,
    }
    assert highest < baseline + MEMORY_ALLOWANCE_MIB, (
        f"syncing {FLEET} ScheduledJobs took the operator to {highest:.0f} MiB,"
        f" from {baseline:.0f} MiB with none"
    )


def versions(admin: AdminClient, namespace: str) -> dict[str, str]:
    """Every ScheduledJob's resourceVersion: any write to one (status, annotations,
    finalizers) changes it."""
    path = f"/apis/pgsched.dev/v1alpha1/namespaces/{namespace}/scheduledjobs"
    found: dict[str, str] = {}
    token = ""
    while True:
        page = admin.get(path, limit=500, **({"continue": token} if token else {}))
        for item in page["items"]:
            found[item["metadata"]["name"]] = item["metadata"]["resourceVersion"]
        token = page["metadata"].get("continue") or ""
        if not token:
            return found


def row_versions(dsn: str) -> dict[str, str]:
    """Every definition's row version (xmin): an UPDATE changes it."""
    with connection.connect(dsn) as conn:
        rows = conn.execute("SELECT name, xmin::text AS version FROM pgsched.job_definitions")
        return {row["name"]: row["version"] for row in rows}


def test_operator_restart_leaves_an_unchanged_fleet_untouched_in_kubernetes_and_postgres(
    host_cluster: ControlPlane, admin: AdminClient, dsn: str, tmp_path: Path
) -> None:
    """On start the operator lists every ScheduledJob: one that did not change while the
    operator was away gets no status patch, no annotation, no Event, and its definition row
    is not rewritten (it was, on every start of every replica: a fleet's worth of dead rows)."""
    namespace, size = "fleet-restart", 300
    host_cluster.kubectl("create", "namespace", namespace)
    fleet.create_fleet(admin, namespace, size)
    first = start(host_cluster, dsn, namespace, tmp_path / "first.log")
    try:
        fleet.wait_for_sync(admin, dsn, namespace, size, timeout=300)
        time.sleep(3)  # the last writes
    finally:
        first.stop()
    before, rows_before = versions(admin, namespace), row_versions(dsn)
    second = start(host_cluster, dsn, namespace, tmp_path / "second.log")
    try:
        # A change after the start: the watch sees it once the list is synced.
        admin.patch(
            f"/apis/pgsched.dev/v1alpha1/namespaces/{namespace}/scheduledjobs/idle-000000",
            {"spec": {"schedule": "0 0 2 1 *"}},
        )
        wait_for(
            lambda: definition_generation(dsn, "idle-000000") == 2,
            120,
            describe="the changed ScheduledJob's generation 2 stored",
        )
        time.sleep(3)
    finally:
        second.stop()
    after, rows_after = versions(admin, namespace), row_versions(dsn)
    touched = sorted(name for name in before if after[name] != before[name])
    rewritten = sorted(name for name in rows_before if rows_after[name] != rows_before[name])
    assert touched == ["idle-000000"], f"{len(touched)} ScheduledJobs written: {touched[:5]}"
    assert rewritten == ["idle-000000"], f"{len(rewritten)} rows rewritten: {rewritten[:5]}"


def definition_generation(dsn: str, name: str) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute(
            "SELECT generation FROM pgsched.job_definitions WHERE name = %s", (name,)
        ).fetchone()
        return int(row["generation"]) if row else 0


def test_first_start_after_the_kopf_release_writes_nothing_to_a_synced_fleet(
    host_cluster: ControlPlane, admin: AdminClient, dsn: str, tmp_path: Path
) -> None:
    """Releases before 0.3 ran on kopf, which left its records in every ScheduledJob (the
    handled spec in ``status.kopf``, progress annotations). The first start of this release
    on such a fleet reads them as what they are, someone else's fields: no ScheduledJob is
    written, no definition row rewritten, no Event posted (docs/operations.md, Upgrades)."""
    namespace, size = "fleet-upgrade", 40
    path = f"/apis/pgsched.dev/v1alpha1/namespaces/{namespace}/scheduledjobs"
    host_cluster.kubectl("create", "namespace", namespace)
    fleet.create_fleet(admin, namespace, size)
    first = start(host_cluster, dsn, namespace, tmp_path / "first.log")
    try:
        fleet.wait_for_sync(admin, dsn, namespace, size, timeout=300)
        time.sleep(3)
    finally:
        first.stop()
    # The previous release's state, planted: kopf's record in the status, its annotation.
    for item in admin.get(path)["items"]:
        name, spec = item["metadata"]["name"], json.dumps(item["spec"])
        admin.patch(f"{path}/{name}/status", {"status": {"kopf": {RECORD: spec}}})
        admin.patch(f"{path}/{name}", {"metadata": {"annotations": {OLD_RECORD: spec}}})
    before, rows_before = versions(admin, namespace), row_versions(dsn)
    events_before = len(admin.get(f"/api/v1/namespaces/{namespace}/events")["items"])
    second = start(host_cluster, dsn, namespace, tmp_path / "second.log")
    try:
        wait_for(lambda: second.listed(), 60, describe="the second operator to list the fleet")
        time.sleep(3)
    finally:
        second.stop()
    assert versions(admin, namespace) == before
    assert row_versions(dsn) == rows_before
    assert len(admin.get(f"/api/v1/namespaces/{namespace}/events")["items"]) == events_before


RECORD = "last-handled-configuration"
OLD_RECORD = f"kopf.pgsched.dev/{RECORD}"
