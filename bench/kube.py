"""The Kubernetes side of the benchmarks: a local control plane, the CRDs, operator replicas.

Everything is the real thing the tests use (``devenv``): etcd, kube-apiserver and
kube-controller-manager (including the CronJob controller, the baseline of the skew
benchmark), kube-scheduler, the real node (kubelet + containerd, real containers of the images
``make images`` builds), and ``pgsched operator`` processes. Job pods run the pgsched
image's heartbeat sidecar and a busybox shell command.

A benchmark starts that control plane itself, or works on one it is given (the smoke
tests give the session's shared cluster) in namespaces of its own: so nothing here names a
namespace but :class:`Cluster`, and the manifests built here have none until applied.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import urllib3
import yaml

from bench.context import Context
from devenv.binaries import Binaries
from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess, start_operator
from devenv.run_api import RunApi
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.engine.models import Run
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import jobs

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "crds"  # ScheduledJob and ConcurrencyPool: the operator needs both


@dataclass
class Cluster:
    """The benchmark's control plane and its namespace, where :meth:`apply` puts the
    (namespace-less) manifests of :func:`scheduled_job` and :func:`cron_job`."""

    control_plane: ControlPlane
    work_dir: Path
    namespace: str

    @property
    def plain_namespace(self) -> str:
        """Where a plain client creates the Jobs pgsched's are compared with
        (``cluster(plain=True)`` makes it)."""
        return f"{self.namespace}-plain"

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.control_plane.kubectl(*args, input=input).stdout

    def apply(self, documents: list[dict[str, Any]], *, chunk: int = 250) -> None:
        for start in range(0, len(documents), chunk):
            text = "---\n".join(yaml.safe_dump(doc) for doc in documents[start : start + chunk])
            self.kubectl("apply", "-n", self.namespace, "-f", "-", input=text)

    def jobs(self) -> list[dict[str, Any]]:
        return list(
            json.loads(self.kubectl("get", "jobs", "-n", self.namespace, "-o", "json"))["items"]
        )

    def operator(
        self, dsn: str, name: str = "operator", *, namespaces: str | None = None, **env: str
    ) -> OperatorProcess:
        """An operator replica that watches ``namespaces`` (by default the benchmark's
        namespace alone)."""
        return start_operator(
            self.control_plane,
            dsn=dsn,
            namespaces=namespaces or self.namespace,
            log_path=self.work_dir / f"{name}.log",
            timeout=120,
            **env,
        )


# A nodeSelector no node matches: the pods of a benchmark that must run none stay Pending,
# as on a control plane without a node, also on a given cluster that has one.
NOWHERE = {"pgsched.dev/bench": "no-node"}


@contextlib.contextmanager
def cluster(
    ctx: Context, *, node: bool = True, host_only: bool = False, plain: bool = False
) -> Iterator[Cluster]:
    """A control plane with the CRDs, the benchmark's namespace (with ``plain``, its
    :attr:`Cluster.plain_namespace` too) and (optionally) a node.

    Given one (``ctx.cluster``, which has its node and the CRDs): that one, in fresh
    namespaces named from ``ctx.namespace`` (two parts of one benchmark never share one),
    deleted afterwards, which stops their pods and CronJobs; the cluster itself is neither
    started nor stopped. ``node=False`` cannot take its node away: a benchmark that must
    run no pods keeps them off it (:data:`NOWHERE`). Otherwise a control plane of its own,
    stopped afterwards, whose namespace is ``ctx.namespace`` itself.

    ``host_only``: always a control plane of its own, without the node or a network
    namespace, so no wait for the machine's node lock (``ControlPlane(host_only=True)``),
    for benchmarks that run no pods."""
    given = None if host_only else ctx.cluster
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgsched-bench-")))
        if given is None:
            control_plane = stack.enter_context(
                ControlPlane(binaries=Binaries.locate(), host_only=host_only)
            )
            if node and not host_only:
                control_plane.add_node("node-1")
            control_plane.apply_crds(CRDS)
            bench = Cluster(control_plane, work, ctx.namespace)
        else:
            bench = Cluster(given, work, f"{ctx.namespace}-{secrets.token_hex(3)}")
        namespaces = [bench.namespace, *([bench.plain_namespace] if plain else [])]
        if given is not None:
            # Once their operator is gone, ScheduledJobs keep a deleted namespace Terminating
            # (pgsched's finalizer); everything else in it goes, pods and CronJobs first.
            stack.callback(
                given.kubectl, "delete", "namespace", *namespaces, "--wait=false", check=False
            )
        for namespace in namespaces:
            bench.kubectl("create", "namespace", namespace)
        yield bench


def wait_for_definitions(dsn: str, count: int, *, timeout: float) -> None:
    """Until the operator has stored ``count`` ScheduledJobs as definitions."""
    wait_for_count(
        dsn,
        "SELECT count(*) AS n FROM pgsched.job_definitions",
        count,
        what=f"{count} ScheduledJobs stored as definitions",
        timeout=timeout,
        interval=2,
    )


def wait_for_count(
    dsn: str, query: str, count: int, *, what: str, timeout: float, interval: float
) -> None:
    """Until ``query`` (one row, a column ``n``) counts ``count``."""

    def counted() -> int:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row["n"])

    with connection.connect(dsn) as conn:
        wait_for(
            lambda: counted() == count,
            timeout,
            interval=interval,
            describe=lambda: f"{what} ({counted()} so far)",
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
        "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": job_template(command), **spec},
    }


def create_scheduled_jobs(
    client: api.KubeApi, namespace: str, documents: list[dict[str, Any]]
) -> None:
    """Create ScheduledJobs fast (kubectl apply is a get and a create each, at 50 qps)."""
    path = api.path_of(
        group=names.GROUP, version=names.VERSION, namespace=namespace, plural=names.PLURAL
    )
    for document in documents:
        client.create(path, document)


def cron_job(name: str, schedule: str, command: str = "true") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Allow",
            "successfulJobsHistoryLimit": 100,
            "jobTemplate": job_template(command),
        },
    }


class FirstSeen:
    """When each key of a watch's events was first seen (``time.monotonic``, and UNIX time).

    ``key`` maps an event to what to time (a Job's name when it is ADDED, say) or None; the
    watch is ``call(*args, **kwargs)`` of the official client, restarted until stopped.
    """

    def __init__(
        self, key: Callable[[dict[str, Any]], str | None], call: Any, *args: Any, **kwargs: Any
    ) -> None:
        self._key = key
        self._call = call
        self._args = args
        self._kwargs = kwargs
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
                    self._call, *self._args, timeout_seconds=900, **self._kwargs
                ):
                    if event is None or self._stopped.is_set():
                        break  # stop() ends the stream with a None event
                    name = self._key(event)
                    if name is not None and name not in self.times:
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

    def start(self) -> Self:
        self._thread.start()
        time.sleep(2)  # let the watch connect before anything is created
        return self

    def wait(self, count: int, timeout: float) -> list[float]:
        deadline = time.monotonic() + timeout
        while len(self.times) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.times)} of {count} seen by {self._call.__name__}")
            time.sleep(0.1)
        return sorted(self.times.values())


class JobArrivals(FirstSeen):
    """When each Job in a namespace became visible to a watcher.

    Both sides of the burst comparison are timed the same way, by a watch on their own
    namespace, to the millisecond — ``creationTimestamp`` has one-second resolution.
    """

    def __init__(self, bench: Cluster, namespace: str) -> None:
        from kubernetes import client

        def added(event: dict[str, Any]) -> str | None:
            return str(event["object"].metadata.name) if event["type"] == "ADDED" else None

        batch = client.BatchV1Api(api_client(bench))
        super().__init__(added, batch.list_namespaced_job, namespace)


def api_client(bench: Cluster) -> Any:
    """The official client, for watches."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(bench.control_plane.kubeconfig))


def create_plain_jobs(
    bench: Cluster,
    definition: Any,
    count: int,
    *,
    namespace: str,
    qps: float,
    burst: int,
    run_api: RunApi,
) -> None:
    """What the launcher of the operator serving ``run_api`` creates for ``count`` runs of
    ``definition`` (each run's lease Secret, then its Job: the same builders, client class
    and limits), one by one, in ``namespace``, by a plain client. Its hand-over of the
    Secret to the Job is a background request, left out here."""
    client = api.KubeApi.from_environment(
        qps=qps, burst=burst, kubeconfig=str(bench.control_plane.kubeconfig)
    )
    settings = jobs.JobSettings(
        image="ghcr.io/pgsched/pgsched:dev",
        run_api_url=run_api.url,
        run_api_ca=(run_api.cert_dir / "ca.crt").read_text(),
    )
    now = datetime.now(UTC)
    manifests = []
    for index in range(count):
        run = Run(
            id=10_000_000 + index,
            definition_id=definition.id,
            status="RUNNING",
            trigger="manual",
            scheduled_for=now,
            deadline_at=None,
            attempt=1,
            retry_of=None,
            request_token=None,
            lease_token=uuid.uuid4(),
            started_at=now,
            heartbeat_at=None,
            finished_at=None,
            cancel_requested=False,
            cancel_requested_at=None,
            reason=None,
            error=None,
            exit_code=None,
            retry_hint=None,
            k8s_job_name=None,
            settled_at=None,
            created_at=now,
            cancelled_by=None,
            retry_decision=None,
        )
        for manifest in (jobs.lease_secret(definition, run), jobs.build(definition, run, settings)):
            manifest["metadata"]["namespace"] = namespace
            manifest["metadata"].pop("ownerReferences")
            manifests.append(manifest)
    for manifest in manifests:
        group = "batch" if manifest["kind"] == "Job" else ""
        plural = "jobs" if manifest["kind"] == "Job" else "secrets"
        client.create(api.path_of(group=group, namespace=namespace, plural=plural), manifest)


def jobs_per_second(arrivals: list[float]) -> float:
    """Throughput from the first Job seen to the last."""
    return (len(arrivals) - 1) / max(arrivals[-1] - arrivals[0], 1e-3)
