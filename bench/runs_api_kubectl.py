"""``kubectl get runs --limit 50`` at ten million history rows, beside ``kubectl get jobs``.

The whole path a user's kubectl takes: the real kube-apiserver with its aggregation layer
(front-proxy certificates), the Service, endpoints and APIService the chart registers
(``devenv.runs_api``), and a ``pgsched operator`` serving the Run API from a database
whose listed namespace has ``DEFINITIONS`` ScheduledJobs (applied for real, stored by the
operator) and a history of ``PGSCHED_BENCH_RUNS_KUBECTL`` finished runs (10M by default)
in monthly partitions, as the history service keeps them (``bench.history.load``: 120 days,
every tenth run one ScheduledJob's, 5% failed).

The baseline, on the same API server in the same minutes: ``kubectl get jobs --limit 50``
of a namespace holding ``JOBS`` Jobs (suspended: no pods). Requests go as kubectl's do
(the Table format, the admin's client certificate), alternating between the pages, so all
see the same machine. Runs pages: the first, one in the middle of the history and the last
(continue tokens), and the first of ``--field-selector status.phase=FAILED``; one run got
by name as ``pgsched describe`` gets it (JSON, with ``status.description``); Jobs: the
first page. Measured: each request's round trip from a client on the API server's host
(the server's time and the aggregator's proxying, plus loopback): p50, p99, and the ratio
to the Jobs page. A page that costs O(page) costs the same at the end of the history as at
its start.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import urllib3

from bench import history, kube, queries
from bench.context import Context
from bench.report import Report
from bench.stats import percentile, ratio
from devenv import pki, runs_api
from devenv.adminclient import AdminClient, ApiError
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.db import queries as engine_queries
from pgsched.engine import history as retention
from pgsched.k8s import names
from pgsched.k8s.runs_api import params

NAME = "runs_api_kubectl"
TITLE = "kubectl get runs --limit 50 at 10M history rows, beside kubectl get jobs"
PAGE = 50
GOAL_MS = 100.0  # p99 of a 50-run page at 10M history rows
DEFINITIONS = 100
JOBS = 1_000  # --quick: QUICK_JOBS
QUICK_JOBS = PAGE + 10
NEVER = "0 3 1 1 *"
# What kubectl get asks for: a Table, else the objects.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def total_rows(quick: bool) -> int:
    raw = os.environ.get("PGSCHED_BENCH_RUNS_KUBECTL", "")
    if raw.strip():
        return int(raw)
    return 20_000 if quick else 10_000_000


def run(ctx: Context) -> Report:
    rows = total_rows(ctx.quick)
    repeats = ctx.rounds_or(10 if ctx.quick else 200)
    dsn = ctx.env.create_database("runs_kubectl")
    try:
        with kube.cluster(ctx, host_only=True, plain=True) as bench:
            registered = runs_api.register(bench.control_plane, bench.work_dir / "runs-api")
            # The chart's access-review cache (10 s), not the tests' 1 s.
            settings = {**registered.environment(), "PGSCHED_RUNS_API_ACCESS_TTL_SECONDS": "10"}
            operator = bench.operator(dsn, **settings)
            try:
                grown = _prepare(bench, dsn, rows, QUICK_JOBS if ctx.quick else JOBS)
                client = AdminClient.from_kubeconfig(bench.control_plane.kubeconfig)
                pages = _pages(bench, grown)
                direct = Direct(registered, bench.control_plane.certificates.front_proxy_client)
                times = _measure(client, direct, dsn, pages, repeats)
            finally:
                operator.stop()
                runs_api.unregister(bench.control_plane)
    finally:
        ctx.env.drop_databases()
    return _report(rows, grown, times)


def _prepare(bench: kube.Cluster, dsn: str, rows: int, jobs: int) -> dict[str, Any]:
    """ScheduledJobs applied and stored, the history grown into monthly partitions, the
    Jobs of the baseline created; the run ids that bound the history."""
    bench.apply([kube.scheduled_job(f"def-{index}", NEVER) for index in range(DEFINITIONS)])
    kube.wait_for_definitions(dsn, DEFINITIONS, timeout=180)
    with connection.connect(dsn) as conn:
        retention.run_once(conn, retention=None)  # this month's partition and the next
        big = conn.execute(queries.get("big_job")).fetchone()
        assert big is not None
        started = time.monotonic()
        history.load(conn, big["id"], first=1, last=rows, total=rows)
        conn.execute(queries.get("vacuum_analyze_runs"))
        loaded = time.monotonic() - started
        bounds = conn.execute(queries.get("history_bounds")).fetchone()
        assert bounds is not None
        described = conn.execute(
            queries.get("run_named"), {"id": (bounds["low"] + bounds["high"]) // 2}
        ).fetchone()
    assert bounds is not None and bounds["n"] == rows, bounds
    for index in range(jobs):
        bench.control_plane.api.create(
            f"/apis/batch/v1/namespaces/{bench.plain_namespace}/jobs",
            _suspended_job(f"job-{index}"),
        )
    assert described is not None
    run_name = names.job_name(described["scheduled_job"], described["id"])
    return {**bounds, "load_seconds": loaded, "jobs": jobs, "described": run_name}


def _suspended_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }


@dataclass(frozen=True)
class Page:
    path: str
    query: dict[str, str]
    accept: str = TABLE  # what kubectl get asks for
    rows: int = PAGE  # rows a Table answer must have; 0: one object, described
    # The Run API's own query for the page (runs_api_page), timed alone in the same rounds.
    database: dict[str, Any] | None = None
    direct: bool = False  # to the operator's port, as the aggregator sends it, not through it


def _pages(bench: kube.Cluster, grown: dict[str, Any]) -> dict[str, Page]:
    """Each request as kubectl (or ``pgsched describe``) sends it."""
    runs = f"/apis/runs.pgsched.dev/v1alpha1/namespaces/{bench.namespace}/runs"
    jobs = f"/apis/batch/v1/namespaces/{bench.plain_namespace}/jobs"
    limit = {"limit": str(PAGE)}
    middle = params.continue_token((grown["low"] + grown["high"]) // 2)
    last = params.continue_token(grown["low"] + PAGE)
    assert middle is not None and last is not None
    query = {"namespaces": [bench.namespace], "scheduled_job": None, "limit": PAGE + 1}
    newest = {**query, "statuses": None, "before": 2**63 - 1}
    return {
        "runs: first page": Page(runs, limit, database=newest),
        "runs: middle page": Page(
            runs,
            {**limit, "continue": middle},
            database={**newest, "before": (grown["low"] + grown["high"]) // 2},
        ),
        "runs: last page": Page(
            runs, {**limit, "continue": last}, database={**newest, "before": grown["low"] + PAGE}
        ),
        "runs: first FAILED page": Page(
            runs,
            {**limit, "fieldSelector": "status.phase=FAILED"},
            database={**newest, "statuses": ["FAILED"]},
        ),
        "runs: first page, to the operator directly": Page(runs, limit, direct=True),
        "runs: one run, described": Page(
            f"{runs}/{grown['described']}", {}, accept="application/json", rows=0
        ),
        "jobs: first page": Page(jobs, limit),
    }


def _measure(
    client: AdminClient, direct: Direct, dsn: str, pages: dict[str, Page], repeats: int
) -> dict[str, list[float]]:
    """Every request ``repeats`` times, in turns, each answer checked to be what it asks;
    and each runs page's query alone on the database (``<page> (database)``)."""
    for page in pages.values():
        wait_for(functools.partial(_answered, direct if page.direct else client, page), 120,
                 describe=f"{page.path} to answer")  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in pages}
    query = engine_queries.get("runs_api_page")
    with connection.connect(dsn) as conn:
        for _ in range(repeats):
            for name, page in pages.items():
                started = time.perf_counter()
                sender = direct if page.direct else client
                answer = sender.request("GET", page.path, query=page.query, accept=page.accept)
                times[name].append((time.perf_counter() - started) * 1000)
                if page.rows:
                    assert len(answer["rows"]) == page.rows, f"{name}: {len(answer['rows'])} rows"
                else:
                    assert answer["status"]["description"]["lines"], f"{name}: not described"
                if page.database is not None:
                    started = time.perf_counter()
                    conn.execute(query, page.database).fetchall()
                    elapsed = (time.perf_counter() - started) * 1000
                    times.setdefault(f"{name} (database)", []).append(elapsed)
    return times


class Direct:
    """Requests straight to the operator's Run API port, with the front proxy's client
    certificate and user headers, as the aggregator sends them (keep-alive, like it)."""

    def __init__(self, served: runs_api.RunsApi, front_proxy: pki.KeyPair) -> None:
        context = ssl.create_default_context(cafile=str(served.cert_dir / "ca.crt"))
        context.load_cert_chain(str(front_proxy.cert), str(front_proxy.key))
        self._pool = urllib3.PoolManager(ssl_context=context, retries=False)
        self._base = served.url

    def request(
        self, method: str, path: str, *, query: dict[str, str], accept: str
    ) -> dict[str, Any]:
        headers = {"Accept": accept, "X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
        url = f"{self._base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        response = self._pool.request(method, url, headers=headers, timeout=30)
        if response.status >= 300:
            raise ApiError(method, path, response.status, json.loads(response.data or b"{}"))
        return json.loads(response.data)  # type: ignore[no-any-return]


def _answered(client: AdminClient | Direct, page: Page) -> bool:
    try:
        client.request("GET", page.path, query=page.query, accept=page.accept)
    except ApiError:
        return False  # the APIService not available yet
    return True


def _report(rows: int, grown: dict[str, Any], times: dict[str, list[float]]) -> Report:
    report = Report(NAME, TITLE, ["page", "p50 ms", "p99 ms", "p99 / jobs p99", "p50 / jobs p50"])
    jobs = times["jobs: first page"]
    for name, measured in times.items():
        report.add(
            page=name,
            **{
                "p50 ms": percentile(measured, 0.5),
                "p99 ms": percentile(measured, 0.99),
                "p99 / jobs p99": ratio(percentile(measured, 0.99), percentile(jobs, 0.99)),
                "p50 / jobs p50": ratio(percentile(measured, 0.5), percentile(jobs, 0.5)),
            },
        )
    runs_rows = [row for row in report.rows if row["page"].endswith("page")
                 and row["page"].startswith("runs:")]  # fmt: skip
    worst = max(runs_rows, key=lambda row: row["p99 ms"])
    report.floor(
        f"p99 of a {PAGE}-run page at {rows:,} history rows (worst page, {worst['page']})",
        worst["p99 ms"],
        GOAL_MS,
        higher_is_better=False,
    )
    first = percentile(times["runs: first page"], 0.99)
    report.notes.append(
        f"paging to the end: the last page's p99 is {ratio(percentile(times['runs: last page'], 0.99), first):.2f}x"
        f" the first's (O(page): about 1)"
    )
    report.notes.append(
        f"history: {grown['n']:,} runs in {grown['partitions']} partitions of pgsched.job_runs"
        f" (loaded in {grown['load_seconds']:.0f} s), {DEFINITIONS} ScheduledJobs; baseline:"
        f" {grown['jobs']:,} suspended Jobs in one namespace of the same API server"
    )
    report.notes.append(
        "round trips from a client on the API server's host, as kubectl asks (Table): the"
        " Run API's include the aggregator's proxying to the operator and its TLS"
    )
    report.data["milliseconds"] = times
    return report
