"""Request annotations through an asynchronous failover, against the real API server and
a real streaming standby: a request stays on the ScheduledJob until every connected
standby has flushed the commit that carried it out, so a failover that loses the commit
finds the request still there and it is carried out again on the new primary, once.

The operator's ScheduledJob handlers (``scheduledjobs.sync`` and ``write``) are called
directly, as its workers call them, against a host-only control plane of the module's own
(no pods run here: no node is needed, nor the machine's node lock); the database is a
primary of the test's own with a standby whose WAL receiver is stopped
(``standby.receiver_paused``): still connected and listed by the primary, flushing
nothing more.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from cli_runner import pgsched
from devenv.controlplane import ControlPlane
from devenv.postgres import PostgresServer
from pgsched.db import connection
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjob_writer, scheduledjobs
from plugins.cluster import host_only_cluster
from plugins.operator import busybox
from plugins.postgres import migrated_server
from standby import promote, receiver_paused, standby_of, wait_caught_up

pytestmark = pytest.mark.api_only

NAMESPACE = "requests"
RUN_NOW = "pgsched.dev/run-now"
REQUEST = {RUN_NOW: "deploy-1", f"{RUN_NOW}-requested-by": "alice"}


@pytest.fixture
def primary() -> Iterator[PostgresServer]:
    yield from migrated_server()


@pytest.fixture
def standby(primary: PostgresServer) -> Iterator[PostgresServer]:
    server = standby_of(primary)
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    with host_only_cluster(NAMESPACE) as control_plane:
        yield control_plane


@pytest.fixture
def kube(cluster: ControlPlane) -> api.KubeApi:
    return api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))


@pytest.fixture
def context(kube: api.KubeApi, primary: PostgresServer) -> Iterator[scheduledjobs.Context]:
    with connection.pool(primary.dsn(), name="pgsched-test-requests", max_size=2) as pool:
        yield scheduledjobs.Context(
            pool=pool, kube=kube, publisher=Publisher(kube), clock=lambda: None
        )


@pytest.fixture
def path(kube: api.KubeApi, context: scheduledjobs.Context) -> str:
    """A ScheduledJob the operator's handlers have stored and published (suspended: no
    tick runs here anyway, and nothing is scheduled)."""
    name = f"deploys-{uuid.uuid4().hex[:8]}"
    kube.create(
        api.path_of(
            group=names.GROUP, version=names.VERSION, namespace=NAMESPACE, plural=names.PLURAL
        ),
        {
            "apiVersion": "pgsched.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"schedule": "0 3 * * *", "suspend": True, "jobTemplate": busybox("true")},
        },
    )
    where = api.scheduled_job_path(NAMESPACE, name)
    handle(context, where)
    return where


def handle(context: scheduledjobs.Context, path: str) -> scheduledjobs.Synced:
    """One sync of the ScheduledJob as it is now, and its writes, as the operator's
    workers do them."""
    synced = scheduledjobs.sync(context, context.kube.get(path), revalidate=False)
    if synced.writes is not None:
        assert scheduledjob_writer.write(context, synced.writes) is None
    return synced


def requests_on(kube: api.KubeApi, path: str) -> dict[str, str]:
    annotations = kube.get(path)["metadata"].get("annotations") or {}
    return {key: value for key, value in annotations.items() if key.startswith(RUN_NOW)}


def manual_runs(dsn: str) -> list[str]:
    with connection.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT request_token FROM pgsched.job_runs WHERE trigger = 'manual' ORDER BY id"
        ).fetchall()
    return [row["request_token"] for row in rows]


def test_a_request_stays_on_the_scheduled_job_until_the_standby_has_flushed_its_commit(
    kube, context, path, primary, standby
):
    wait_caught_up(primary, standby)
    with receiver_paused(standby):
        kube.merge_patch(path, {"metadata": {"annotations": REQUEST}})
        for _ in range(3):  # the first sync carries it out; the re-checks do not again
            synced = handle(context, path)
            assert requests_on(kube, path) == REQUEST, "removed before the standby had it"
            assert 0 < synced.retry_in <= max(scheduledjobs.DURABILITY_RECHECK_SECONDS)
        assert manual_runs(primary.dsn()) == ["annotation:deploy-1"]
    wait_caught_up(primary, standby)

    synced = handle(context, path)

    assert synced.retry_in is None
    assert requests_on(kube, path) == {}
    assert manual_runs(primary.dsn()) == ["annotation:deploy-1"]


def test_a_request_whose_commit_a_failover_lost_is_carried_out_once_on_the_new_primary(
    kube, context, path, primary, standby
):
    wait_caught_up(primary, standby)
    with receiver_paused(standby) as receiver:
        kube.merge_patch(path, {"metadata": {"annotations": REQUEST}})
        handle(context, path)
        assert manual_runs(primary.dsn()) == ["annotation:deploy-1"]  # acknowledged here
        primary.stop(mode="immediate")
        os.kill(receiver, signal.SIGKILL)  # what it had not received is lost with the primary
    promote(standby)
    assert manual_runs(standby.dsn()) == [], "the standby had the commit: nothing was lost"

    with connection.pool(standby.dsn(), name="pgsched-test-requests", max_size=2) as pool:
        promoted = replace(context, pool=pool)  # the operator's DSN follows the primary
        handle(promoted, path)
        assert manual_runs(standby.dsn()) == ["annotation:deploy-1"]
        assert requests_on(kube, path) == {}  # no standby of the new primary: as durable as it gets
        handle(promoted, path)
        restarted = replace(promoted, in_hand={}, unflushed={})
        handle(restarted, path)

    assert manual_runs(standby.dsn()) == ["annotation:deploy-1"]


def test_the_cli_says_a_request_was_carried_out_and_waits_for_the_lagging_standby(
    cluster, kube, context, path, primary, standby
):
    """``pgsched run-now`` through the API server, with an operator's worker handling the
    ScheduledJob meanwhile: the standby lags longer than the CLI waits, and the CLI says
    the request was carried out and is kept for the standby, not that no operator took it."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def worker() -> None:
        while not stop.is_set():
            try:
                synced = handle(context, path)
            except BaseException as error:  # shown by the test, not lost in the thread
                failures.append(error)
                return
            stop.wait(synced.retry_in or 0.1)

    wait_caught_up(primary, standby)
    thread = threading.Thread(target=worker, daemon=True)
    with receiver_paused(standby):
        thread.start()
        try:
            name = path.rpartition("/")[2]
            wait = scheduledjobs.DURABILITY_NOTICE_SECONDS + 3
            sent = pgsched(
                "run-now",
                name,
                "-n",
                NAMESPACE,
                "--token",
                "lagging",
                "--timeout",
                f"{wait:g}",
                kubeconfig=cluster.kubeconfig,
            )
            assert manual_runs(primary.dsn()) == ["annotation:lagging"]
            assert requests_on(kube, path)[RUN_NOW] == "lagging"
        finally:
            stop.set()
            thread.join()
    assert not failures, failures
    assert sent.code == 0, sent.err
    assert "the operator carried it out but has not removed it after" in sent.out, sent.out
    assert "waits for the database's standby to receive it" in sent.out


def test_a_request_whose_commit_survived_the_failover_is_not_carried_out_twice(
    kube, context, path, primary, standby
):
    """The standby received the commit, but the primary died before the operator saw that:
    the request is still there and is carried out again on the new primary, changing
    nothing (its token)."""
    wait_caught_up(primary, standby)
    with receiver_paused(standby):
        kube.merge_patch(path, {"metadata": {"annotations": REQUEST}})
        handle(context, path)
        assert requests_on(kube, path) == REQUEST
    wait_caught_up(primary, standby)
    primary.stop(mode="immediate")
    promote(standby)
    assert manual_runs(standby.dsn()) == ["annotation:deploy-1"]

    with connection.pool(standby.dsn(), name="pgsched-test-requests", max_size=2) as pool:
        handle(replace(context, pool=pool), path)

    assert requests_on(kube, path) == {}
    assert manual_runs(standby.dsn()) == ["annotation:deploy-1"]
