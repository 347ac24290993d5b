"""A fleet of ScheduledJobs: the operator starts, syncs them and keeps up.

For each fleet size (1,000, 10,000 and 100,000 by default; ``--sizes``) the benchmark
creates that many idle ScheduledJobs (yearly) in a namespace of their own, straight on the
API server with parallel requests, before any operator runs; then it starts one operator
replica on a fresh database, watching that namespace, and measures:

- **sync**: from the operator's start until every ScheduledJob is a definition in Postgres
  and has its status patched (``status.observedGeneration``), and the API requests it took;
- **RSS** when synced, its peak (``VmHWM``), and after an idle window (steady state);
- **idle API usage**: requests per minute the API server answered on the operator's
  resources during the idle window (its ``apiserver_request_total``, by verb), next to the
  operator's own count (``pgsched_kube_requests_total``, its watches included);
- **tick time**: the mean and max of the leader's whole tick during the idle window.

The cluster is host-only (``ControlPlane(host_only=True)``: no node, no network namespace,
so no wait for the machine's node lock): idle ScheduledJobs start no pods. Baseline: the
same operator on an empty namespace, measured first in the same run; the figures are
curves over the sizes, plotted to ``bench/results/fleet.png``.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import urllib3

from bench import footprint, kube
from bench.context import Context
from bench.report import Report, emit, plot_path, pyplot
from devenv.adminclient import AdminClient, Credentials
from devenv.operators import OperatorProcess
from devenv.waiting import wait_for
from pgsched.k8s.client import api as pgsched_api
from pgsched.k8s.client.finalizers import FINALIZER

NAME = "fleet"
TITLE = "a fleet of idle ScheduledJobs: sync time, RSS, idle API requests, tick"
SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (50, 300)
GOAL_RSS_MIB = 400.0  # at 100,000 ScheduledJobs (bench/README.md, "Floors at a glance")
# The resources the operator reads and writes; other clients of the API server (the
# controller manager, this benchmark) are left out of the idle count by resource and verb.
RESOURCES = {"scheduledjobs", "concurrencypools", "events", "jobs", "pods"}
# The operator's API budget during the benchmark: the sync of a new fleet takes three writes
# per ScheduledJob (finalizer, status, Scheduled Event), so at the default 20 qps 100,000
# take over 4 hours of budget (their definitions are stored, and scheduled, long before);
# the idle figures do not depend on it.
QPS, BURST = "500", "1000"
CREATORS = 16  # parallel create requests


@dataclass(frozen=True)
class FleetSample:
    size: int
    created_seconds: float
    scheduled_seconds: float  # until every ScheduledJob is a definition (runs can start)
    sync_seconds: float  # until every status is written too
    sync_cpu_ms_per_job: float  # the operator's CPU time until synced, per ScheduledJob
    sync_writes: int  # writes the API server answered on the operator's resources, until synced
    sync_writes_per_second: float
    plain_writes_per_second: float  # a plain client's same writes, same API server and run
    rss_synced_mib: float
    rss_peak_mib: float
    rss_idle_mib: float
    cpu_idle_percent: float
    idle_requests_per_minute: float  # the API server's count, the operator's resources
    idle_writes_per_minute: float  # of which writes (POST, PATCH, PUT, DELETE)
    own_requests_per_minute: float  # the operator's own client
    tick_mean_ms: float
    tick_max_ms: float


def run(ctx: Context) -> Report:
    sizes = ctx.sizes or (QUICK_SIZES if ctx.quick else SIZES)
    idle_window = 10.0 if ctx.quick else 120.0
    samples: list[FleetSample] = []
    with kube.cluster(ctx, host_only=True) as bench:
        admin = AdminClient.from_kubeconfig(bench.control_plane.kubeconfig)
        baseline = _measure(ctx, bench, admin, 0, idle_window)
        for size in sizes:
            samples.append(_measure(ctx, bench, admin, size, idle_window))
            if size != sizes[-1]:  # the figures so far, in case a larger fleet never ends
                emit(_report(ctx, baseline, samples, idle_window), out_dir=ctx.out_dir, context={})
    return _report(ctx, baseline, samples, idle_window)


def _report(
    ctx: Context, baseline: FleetSample, samples: list[FleetSample], idle_window: float
) -> Report:
    report = Report(NAME, TITLE, columns=list(COLUMNS))
    for sample in [baseline, *samples]:
        report.add(**{column: getattr(sample, field) for column, field in COLUMNS.items()})
    largest = samples[-1]
    rss = _fit([(s.size, s.rss_idle_mib) for s in [baseline, *samples]])
    sync = _fit([(s.size, s.sync_seconds) for s in samples])
    report.data["samples"] = [asdict(sample) for sample in [baseline, *samples]]
    report.data["fits"] = {"rss_mib": rss, "sync_seconds": sync}
    measured = largest.size >= 100_000
    report.floor(
        f"RSS at 100,000 ScheduledJobs, MiB ({'measured' if measured else 'fitted line'})",
        largest.rss_idle_mib if measured else rss.at(100_000),
        GOAL_RSS_MIB,
        higher_is_better=False,
    )
    report.notes.append(
        f"idle windows of {idle_window:g}s; the operator at {QPS} qps (burst {BURST});"
        f" idle RSS = {rss.intercept:.0f} MiB + {1000 * rss.slope:.2f} MiB per 1,000"
        f" ScheduledJobs (least squares), {rss.at(100_000):.0f} MiB at 100,000; sync ="
        f" {1000 * sync.slope:.1f} s per 1,000, {sync.at(100_000) / 60:.0f} min at 100,000;"
        f" load average {_load()}"
    )
    for sample in samples:
        report.notes.append(
            f"{sample.size:,}: the sync's writes at {sample.sync_writes_per_second:.0f}/s,"
            f" a plain client's same writes at {sample.plain_writes_per_second:.0f}/s:"
            f" {sample.sync_writes_per_second / sample.plain_writes_per_second:.2f} of it"
        )
    if ctx.plots:
        report.plots.append(_plot(ctx, baseline, samples, rss))
    return report


COLUMNS = {
    "ScheduledJobs": "size",
    "created s": "created_seconds",
    "scheduled s": "scheduled_seconds",
    "sync s": "sync_seconds",
    "sync CPU ms/SJ": "sync_cpu_ms_per_job",
    "sync writes": "sync_writes",
    "sync writes/s": "sync_writes_per_second",
    "plain client writes/s": "plain_writes_per_second",
    "RSS synced MiB": "rss_synced_mib",
    "RSS peak MiB": "rss_peak_mib",
    "RSS idle MiB": "rss_idle_mib",
    "idle CPU %": "cpu_idle_percent",
    "idle req/min": "idle_requests_per_minute",
    "idle writes/min": "idle_writes_per_minute",
    "tick mean ms": "tick_mean_ms",
    "tick max ms": "tick_max_ms",
}


@dataclass(frozen=True)
class Line:
    intercept: float
    slope: float  # per ScheduledJob

    def at(self, size: float) -> float:
        return self.intercept + self.slope * size


def _fit(points: list[tuple[float, float]]) -> Line:
    """Least squares; one point is a line through the origin."""
    if len(points) == 1:
        x, y = points[0]
        return Line(0.0, y / x if x else math.nan)
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else math.nan
    return Line(mean_y - slope * mean_x, slope)


def _measure(
    ctx: Context, bench: kube.Cluster, admin: AdminClient, size: int, idle_window: float
) -> FleetSample:
    namespace = f"fleet-{size}"
    bench.kubectl("create", "namespace", namespace)
    started = time.monotonic()
    create_fleet(admin, namespace, size)
    created = time.monotonic() - started
    dsn = ctx.env.create_database(f"fleet{size}")
    peak = PeakRss()
    started = time.monotonic()
    before_sync = server_requests(admin)
    operator = bench.operator(
        dsn,
        name=f"operator-{size}",
        namespaces=namespace,
        PGSCHED_API_QPS=QPS,
        PGSCHED_API_BURST=BURST,
    )
    ready = time.monotonic() - started  # start-up done (healthy): the writes can begin
    try:
        peak.follow(operator.pid)
        kube.wait_for_definitions(dsn, size, timeout=4 * 3600)
        scheduled = time.monotonic() - started
        wait_for_sync(admin, dsn, namespace, size, timeout=4 * 3600)
        synced = time.monotonic() - started
        sync_cpu = footprint.cpu_seconds(operator.pid)
        sync_writes = _writes(server_requests(admin) - before_sync)
        rss_synced = footprint.rss_mib(operator.pid)
        time.sleep(10 if size else 0)  # the last handlers' patches settle
        before_server, before_own, before_tick = (
            server_requests(admin),
            _own_requests(operator),
            _ticks(operator),
        )
        idle = footprint.measure(operator, idle_window)
        after_server, after_own, after_tick = (
            server_requests(admin),
            _own_requests(operator),
            _ticks(operator),
        )
        tick_max = _tick_max(operator)
        rss_peak = peak.stop()
    finally:
        peak.stop()
        operator.stop()
    ctx.env.drop_databases()
    minutes = idle_window / 60
    delta = after_server - before_server
    ticks = after_tick[1] - before_tick[1]
    return FleetSample(
        size=size,
        created_seconds=created,
        scheduled_seconds=scheduled,
        sync_seconds=synced,
        sync_cpu_ms_per_job=1000 * sync_cpu / size if size else math.nan,
        sync_writes=sync_writes,
        sync_writes_per_second=sync_writes / (synced - ready) if size else math.nan,
        plain_writes_per_second=_plain_client(bench, admin, size) if size else math.nan,
        rss_synced_mib=rss_synced,
        rss_peak_mib=rss_peak,
        rss_idle_mib=idle.rss_mib,
        cpu_idle_percent=idle.cpu_percent,
        idle_requests_per_minute=sum(delta.values()) / minutes,
        idle_writes_per_minute=_writes(delta) / minutes,
        own_requests_per_minute=sum((after_own - before_own).values()) / minutes,
        tick_mean_ms=1000 * (after_tick[0] - before_tick[0]) / ticks if ticks else math.nan,
        tick_max_ms=1000 * tick_max,
    )


# The plain client's sample: enough writes for a steady rate, without doubling the run.
PLAIN_SAMPLE = 2_000
PLAIN_THREADS = 16


def _plain_client(bench: kube.Cluster, admin: AdminClient, size: int) -> float:
    """Writes per second of a plain client making the sync's three writes per ScheduledJob
    (finalizer patch, status patch, Event) on a sample of new ones, at the operator's
    limits, with as many threads as the operator has writers: what the API server allows."""
    namespace = f"plain-{size}"
    bench.kubectl("create", "namespace", namespace)
    count = min(size, PLAIN_SAMPLE)
    create_fleet(admin, namespace, count)
    client = pgsched_api.KubeApi.from_environment(
        qps=float(QPS), burst=int(BURST), kubeconfig=str(bench.control_plane.kubeconfig)
    )

    def sync(i: int) -> None:
        name = f"idle-{i:06d}"
        path = pgsched_api.scheduled_job_path(namespace, name)
        client.merge_patch(path, {"metadata": {"finalizers": [FINALIZER]}})
        client.merge_patch(f"{path}/status", {"status": PLAIN_STATUS})
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.gen1.scheduled", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "pgsched.dev/v1alpha1",
                "kind": "ScheduledJob",
                "name": name,
                "namespace": namespace,
            },
            "type": "Normal",
            "reason": "Scheduled",
            "message": "generation 1 accepted",
        }
        client.create(pgsched_api.path_of(namespace=namespace, plural="events"), event)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=PLAIN_THREADS) as pool:
        for _ in pool.map(sync, range(count)):
            pass
    return 3 * count / (time.monotonic() - started)


# A status of the size the operator writes for an idle ScheduledJob.
PLAIN_STATUS = {
    "observedGeneration": 1,
    "schedule": "0 0 1 1 *",
    "timeZone": "UTC",
    "suspended": False,
    "active": 0,
    "queued": 0,
    "nextRunAt": "2027-01-01T00:00:00Z",
    "nextRuns": [f"{year}-01-01T00:00:00Z" for year in range(2027, 2032)],
    "lastScheduleTime": None,
    "lastRunTime": None,
    "lastRun": None,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Scheduled",
            "message": "generation 1 is scheduled",
            "lastTransitionTime": "2026-12-01T00:00:00Z",
        },
        {
            "type": "Suspended",
            "status": "False",
            "reason": "Active",
            "message": "runs are scheduled",
            "lastTransitionTime": "2026-12-01T00:00:00Z",
        },
    ],
}


def _writes(counts: Counter[tuple[str, str]]) -> int:
    return sum(n for (verb, _), n in counts.items() if verb in ("POST", "PATCH", "PUT", "DELETE"))


def create_fleet(admin: AdminClient, namespace: str, size: int, *, workers: int = CREATORS) -> None:
    """``size`` yearly ScheduledJobs (so none is due), created in parallel."""
    path = f"/apis/pgsched.dev/v1alpha1/namespaces/{namespace}/scheduledjobs"

    def create(i: int) -> None:
        body = kube.scheduled_job(f"idle-{i:06d}", "0 0 1 1 *")
        body["metadata"]["namespace"] = namespace
        admin.create(path, body)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(create, range(size)):
            pass


def wait_for_sync(
    admin: AdminClient, dsn: str, namespace: str, size: int, *, timeout: float
) -> None:
    """Until every ScheduledJob is a definition and has its status patched.

    Waited for in the database (the operator records each generation it published), then
    checked once on the API server: listing the whole fleet every few seconds would cost
    the API server more than the sync being measured (a list of 10,000 every 5 s made the
    sync's writes 0.27 of a plain client's)."""
    kube.wait_for_definitions(dsn, size, timeout=timeout)

    kube.wait_for_count(
        dsn,
        "SELECT count(*) AS n FROM pgsched.job_definitions AS d"
        " JOIN pgsched.published_generations AS p ON p.definition_id = d.id"
        " WHERE p.generation = d.generation",
        size,
        what=f"every ScheduledJob in {namespace} published",
        timeout=timeout,
        interval=1,
    )
    wait_for(
        lambda: unsynced_statuses(admin, namespace) == 0,
        timeout,
        interval=30,
        describe=lambda: f"every ScheduledJob in {namespace} to show its status",
    )


def unsynced_statuses(admin: AdminClient, namespace: str) -> int:
    """ScheduledJobs whose status does not yet show their generation (paged list)."""
    path = f"/apis/pgsched.dev/v1alpha1/namespaces/{namespace}/scheduledjobs"
    missing, token = 0, ""
    while True:
        query: dict[str, str | int] = {"limit": 1000}
        if token:
            query["continue"] = token
        page = admin.get(path, **query)
        for item in page.get("items") or []:
            observed = (item.get("status") or {}).get("observedGeneration")
            missing += observed != item["metadata"].get("generation")
        token = page.get("metadata", {}).get("continue") or ""
        if not token:
            return missing


def server_requests(admin: AdminClient, *, successful: bool = False) -> Counter[tuple[str, str]]:
    """The API server's request counts on the operator's resources, by (verb, resource);
    ``successful``: only those answered 2xx (no conflicts, no errors).

    ``apiserver_request_total`` has no namespace label: one operator runs at a time."""
    text = _raw_get(admin, "/metrics")
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if successful and not labels.get("code", "").startswith("2"):
            continue
        if labels.get("resource") in RESOURCES:
            counts[(labels.get("verb", ""), labels["resource"])] += int(
                float(line.rsplit(" ", 1)[1])
            )
    return counts


def _raw_get(admin: AdminClient, path: str) -> str:
    credentials: Credentials = admin.credentials
    pool = urllib3.PoolManager(
        ca_certs=str(credentials.ca_file),
        cert_file=str(credentials.cert_file) if credentials.cert_file else None,
        key_file=str(credentials.key_file) if credentials.key_file else None,
    )
    response = pool.request("GET", credentials.server + path, timeout=30)
    return str(response.data.decode())


def _own_requests(operator: OperatorProcess) -> Counter[str]:
    counts: Counter[str] = Counter()
    for labels, value in _samples(operator.metrics(), "pgsched_kube_requests_total"):
        counts[labels.get("verb", "")] += int(value)
    return counts


def _ticks(operator: OperatorProcess) -> tuple[float, float]:
    """(sum of seconds, count) of the leader's whole ticks so far."""
    text = operator.metrics()
    total = dict(
        (name, value)
        for name in ("sum", "count")
        for labels, value in _samples(text, f"pgsched_tick_duration_seconds_{name}")
        if labels.get("phase") == "tick"
    )
    return total.get("sum", 0.0), total.get("count", 0.0)


def _tick_max(operator: OperatorProcess) -> float:
    """The smallest histogram bound the slowest whole tick stayed under."""
    buckets = sorted(
        (float(labels["le"]), value)
        for labels, value in _samples(operator.metrics(), "pgsched_tick_duration_seconds_bucket")
        if labels.get("phase") == "tick"
    )
    total = buckets[-1][1] if buckets else 0
    return next((bound for bound, value in buckets if value >= total), math.nan)


def _samples(text: str, metric: str) -> list[tuple[dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        if line.startswith(metric + "{") or line.startswith(metric + " "):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            found.append((labels, float(line.rsplit(" ", 1)[1])))
    return found


class PeakRss:
    """The largest RSS a process reached, sampled every half second (``VmHWM`` is the
    same figure, but the kernel resets it on some exec paths; sampling is plain)."""

    def __init__(self) -> None:
        self._peak = 0.0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, pid: int) -> None:
        def sample() -> None:
            while not self._stopped.wait(0.5):
                rss = footprint.rss_mib(pid)
                if not math.isnan(rss):
                    self._peak = max(self._peak, rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        return self._peak


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def _plot(ctx: Context, baseline: FleetSample, samples: list[FleetSample], rss: Line) -> str:
    plt = pyplot()
    sizes = [max(1, s.size) for s in samples]
    figure, (memory, sync, api) = plt.subplots(1, 3, figsize=(15, 4.5))
    memory.plot(sizes, [s.rss_idle_mib for s in samples], "o-", label="RSS idle")
    memory.plot(sizes, [s.rss_peak_mib for s in samples], "s--", label="RSS peak (sync)")
    ahead = [sizes[0], 100_000]
    memory.plot(ahead, [rss.at(x) for x in ahead], ":", color="C0", label="fitted line")
    memory.axhline(baseline.rss_idle_mib, color="grey", linestyle=":", label="empty namespace")
    memory.axhline(GOAL_RSS_MIB, color="red", linestyle="-.", label="goal at 100k")
    memory.set(xscale="log", xlabel="ScheduledJobs", ylabel="MiB", title="operator memory")
    memory.legend()
    sync.plot(sizes, [s.scheduled_seconds for s in samples], "s--", label="every job scheduled (s)")
    sync.plot(sizes, [s.sync_seconds for s in samples], "o-", label="every status written (s)")
    sync.set(xscale="log", yscale="log", xlabel="ScheduledJobs", ylabel="seconds")
    sync.set_title(f"time to sync (operator at {QPS} qps)")
    sync.legend()
    api.plot(sizes, [s.idle_requests_per_minute for s in samples], "o-", label="idle requests/min")
    api.plot(sizes, [s.tick_mean_ms for s in samples], "s--", label="idle tick mean (ms)")
    api.set(xscale="log", xlabel="ScheduledJobs", title="idle: API requests and tick")
    api.legend()
    figure.tight_layout()
    path = plot_path(ctx.out_dir, NAME)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return str(path)
