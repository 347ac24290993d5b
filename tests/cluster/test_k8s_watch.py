"""The operator's list-then-watch against a real API server (``pgsched.k8s.client.watch``).

A host-only control plane of its own (no node): what is tested is the API's list, watch
and 410 behaviour, including a resourceVersion compacted away while the API server was
down — the case where a watch must list everything again and miss nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence

import pytest

from bench import kube as bench_kube
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.k8s.client import api
from pgsched.k8s.client.watch import Event, Watch
from plugins.cluster import host_only_cluster

pytestmark = pytest.mark.api_only

NAMESPACE = "watched"
PATH = f"/apis/pgsched.dev/v1alpha1/namespaces/{NAMESPACE}/scheduledjobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    with host_only_cluster(NAMESPACE) as control_plane:
        yield control_plane


class Recorder:
    """A watch's consumer: every batch it was handed, in order."""

    def __init__(self) -> None:
        self.batches: list[list[Event]] = []
        self._lock = threading.Lock()

    def __call__(self, events: Sequence[Event]) -> None:
        with self._lock:
            self.batches.append(list(events))

    def events(self) -> list[Event]:
        with self._lock:
            return [event for batch in self.batches for event in batch]

    def seen(self, name: str, *, kind: str | None = None, schedule: str | None = None) -> bool:
        return any(
            event.object["metadata"]["name"] == name
            and (kind is None or event.type == kind)
            and (schedule is None or event.object["spec"].get("schedule") == schedule)
            for event in self.events()
        )


def create(cluster: ControlPlane, name: str) -> None:
    body = bench_kube.scheduled_job(name, "0 0 1 1 *")
    body["metadata"]["namespace"] = NAMESPACE
    cluster.api.create(PATH, body)


def start_watch(cluster: ControlPlane, *, chunk: int) -> tuple[Watch, Recorder, threading.Thread]:
    client = api.KubeApi.from_environment(qps=100, burst=200, kubeconfig=str(cluster.kubeconfig))
    watch, recorder = Watch(client, PATH, name="test", chunk=chunk), Recorder()
    thread = threading.Thread(target=watch.run, args=(recorder,), daemon=True)
    thread.start()
    return watch, recorder, thread


def test_a_watch_lists_in_chunks_then_hands_over_each_change(cluster: ControlPlane) -> None:
    for i in range(20):
        create(cluster, f"chunked-{i:02d}")
    watch, recorder, thread = start_watch(cluster, chunk=7)
    try:
        assert watch.listed.wait(30)
        listed = recorder.events()
        assert [len(batch) for batch in recorder.batches] == [7, 7, 6]
        assert all(event.listed and event.type == "ADDED" for event in listed)
        assert len({event.object["metadata"]["name"] for event in listed}) == 20

        cluster.api.patch(f"{PATH}/chunked-00", {"spec": {"schedule": "0 0 2 1 *"}})
        create(cluster, "chunked-new")
        cluster.api.delete(f"{PATH}/chunked-01")
        wait_for(
            lambda: (
                recorder.seen("chunked-00", kind="MODIFIED", schedule="0 0 2 1 *")
                and recorder.seen("chunked-new", kind="ADDED")
                and recorder.seen("chunked-01", kind="DELETED")
            ),
            30,
            describe=lambda: (
                f"the three changes, got {[(e.type, e.object['metadata']['name']) for e in recorder.events()[20:]]}"
            ),
        )
        assert not any(event.listed for event in recorder.events()[20:])
        assert watch.lists == 1
    finally:
        watch.stop()
        thread.join(10)
    assert not thread.is_alive(), "stop() did not end the watch while it waited for events"


def test_a_watch_whose_version_was_compacted_away_lists_again_and_misses_nothing(
    cluster: ControlPlane,
) -> None:
    """While the API server is down, an object changes (written to etcd directly, as an API
    server of another replica would have) and etcd compacts its history: the watch's
    resourceVersion no longer exists. The API server answers 410 Gone; the watch lists
    again, and the change is handed over."""
    create(cluster, "compacted")
    watch, recorder, thread = start_watch(cluster, chunk=500)
    try:
        assert watch.listed.wait(30)
        key = f"/registry/pgsched.dev/scheduledjobs/{NAMESPACE}/compacted"
        cluster.stop_apiserver()
        stored = json.loads(cluster.etcdctl("get", key, "--print-value-only"))
        stored["spec"]["schedule"] = "0 0 3 1 *"
        cluster.etcdctl("put", key, data=json.dumps(stored).encode())
        revision = json.loads(cluster.etcdctl("endpoint", "status", "-w", "json"))[0]["Status"][
            "header"
        ]["revision"]
        cluster.etcdctl("compact", str(revision))
        cluster.start_apiserver()
        wait_for(
            lambda: recorder.seen("compacted", schedule="0 0 3 1 *"),
            90,
            describe="the change made while the API server was down",
        )
        assert watch.lists == 2
        [seen] = [
            event
            for event in recorder.events()
            if event.object["metadata"]["name"] == "compacted"
            and event.object["spec"]["schedule"] == "0 0 3 1 *"
        ]
        assert seen.listed
    finally:
        watch.stop()
        thread.join(10)
