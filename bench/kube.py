"""The Kubernetes side of the benchmarks: a local control plane, the CRD, operator replicas.

Everything is the real thing the tests use (``devenv``): etcd, kube-apiserver and
kube-controller-manager (including the CronJob controller, the baseline of the skew
benchmark), kube-scheduler, the real node (kubelet + containerd, real containers of the images
``make images`` builds), and ``pgsched operator`` processes. Job pods run the pgsched
image's heartbeat sidecar and a busybox shell command.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml

from devenv.binaries import Binaries
from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess, start_operator
from devenv.waiting import wait_for
from pgsched.db import connection

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "crds"  # ScheduledJob and ConcurrencyPool: the operator needs both
NAMESPACE = "bench"


@dataclass
class Cluster:
    control_plane: ControlPlane
    work_dir: Path

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.control_plane.kubectl(*args, input=input).stdout

    def apply(self, documents: list[dict[str, Any]], *, chunk: int = 250) -> None:
        for start in range(0, len(documents), chunk):
            text = "---\n".join(yaml.safe_dump(doc) for doc in documents[start : start + chunk])
            self.kubectl("apply", "-f", "-", input=text)

    def jobs(self) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "jobs", "-n", NAMESPACE, "-o", "json"))["items"])

    def operator(
        self, dsn: str, name: str = "operator", *, namespaces: str = NAMESPACE, **env: str
    ) -> OperatorProcess:
        return start_operator(
            kubeconfig=self.control_plane.kubeconfig,
            dsn=dsn,
            namespaces=namespaces,
            log_path=self.work_dir / f"{name}.log",
            timeout=120,
            **env,
        )


@contextlib.contextmanager
def cluster(*, node: bool = True, host_only: bool = False) -> Iterator[Cluster]:
    """A control plane with the CRDs, the ``bench`` namespace and (optionally) a node.

    ``host_only``: no node and no network namespace, so no wait for the machine's node
    lock (``ControlPlane(host_only=True)``), for benchmarks that run no pods."""
    with (
        tempfile.TemporaryDirectory(prefix="pgsched-bench-") as work,
        ControlPlane(binaries=Binaries.locate(), host_only=host_only) as control_plane,
    ):
        if node and not host_only:
            control_plane.add_node("node-1")
        control_plane.apply_crds(CRDS)
        control_plane.kubectl("create", "namespace", NAMESPACE)
        yield Cluster(control_plane, Path(work))


def wait_for_definitions(dsn: str, count: int, *, timeout: float) -> None:
    """Until the operator has stored ``count`` ScheduledJobs as definitions."""

    def stored() -> int:
        row = conn.execute("SELECT count(*) AS n FROM pgsched.job_definitions").fetchone()
        assert row is not None
        return int(row["n"])

    with connection.connect(dsn) as conn:
        wait_for(
            lambda: stored() == count,
            timeout,
            interval=2,
            describe=lambda: f"{count} ScheduledJobs stored as definitions ({stored()} so far)",
        )


def job_dsn_secret(bench: Cluster, dsn: str) -> None:
    """The job pods' narrow database role and its Secret, as the chart wires them."""
    with connection.connect(dsn) as conn:
        conn.execute(
            "DO $$ BEGIN CREATE ROLE bench_job LOGIN IN ROLE pgsched_job;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    job_dsn = bench.control_plane.in_cluster_dsn(dsn).replace("user=postgres", "user=bench_job")
    bench.kubectl(
        "create",
        "secret",
        "generic",
        "pgsched-job-dsn",
        "-n",
        NAMESPACE,
        f"--from-literal=dsn={job_dsn}",
    )


def job_template(command: str) -> dict[str, Any]:
    return {
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}
                    ],
                }
            }
        }
    }


def scheduled_job(name: str, schedule: str, command: str = "true", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"schedule": schedule, "jobTemplate": job_template(command), **spec},
    }


def cron_job(name: str, schedule: str, command: str = "true") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Allow",
            "successfulJobsHistoryLimit": 100,
            "jobTemplate": job_template(command),
        },
    }


class JobArrivals:
    """When each Job in a namespace became visible to a watcher (``time.monotonic``).

    Both sides of the burst comparison are timed the same way, by a watch on their own
    namespace, to the millisecond — ``creationTimestamp`` has one-second resolution.
    """

    def __init__(self, bench: Cluster, namespace: str) -> None:
        from kubernetes import client, config

        self._batch = client.BatchV1Api(
            config.new_client_from_config(config_file=str(bench.control_plane.kubeconfig))
        )
        self._namespace = namespace
        self.times: dict[str, float] = {}
        self.wall: dict[str, float] = {}  # the same moments as UNIX time
        self._stopped = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stopped.is_set():
            self._stream = watch.Watch()
            try:
                for event in self._stream.stream(
                    self._batch.list_namespaced_job, self._namespace, timeout_seconds=900
                ):
                    if event is None or self._stopped.is_set():
                        break  # stop() ends the stream with a None event
                    name = event["object"].metadata.name
                    if event["type"] == "ADDED" and name not in self.times:
                        self.times[name] = time.monotonic()
                        self.wall[name] = time.time()
            except (ApiException, OSError, ValueError, urllib3.exceptions.HTTPError):
                # A fresh API server's watch cache can refuse a watch at first (504), and
                # a stopped one refuses connections: retry until stopped.
                self._stopped.wait(0.2)

    def stop(self) -> None:
        """End the watch (at its next event, or when the API server goes away)."""
        self._stopped.set()
        if self._stream is not None:
            self._stream.stop()

    def start(self) -> JobArrivals:
        self._thread.start()
        time.sleep(2)  # let the watch connect before anything is created
        return self

    def wait(self, count: int, timeout: float) -> list[float]:
        deadline = time.monotonic() + timeout
        while len(self.times) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.times)} of {count} Jobs seen in {self._namespace}")
            time.sleep(0.1)
        return sorted(self.times.values())


def jobs_per_second(arrivals: list[float]) -> float:
    """Throughput from the first Job seen to the last."""
    return (len(arrivals) - 1) / max(arrivals[-1] - arrivals[0], 1e-3)
