"""One tenant deletes a namespace full of running runs: does another tenant's status lag?

Deleting a served namespace makes the operator cancel each of its running runs
(``NamespaceDeletion``), wait for them to stop and release each ScheduledJob's finalizer:
status patches, Events and Job deletions for every one of them, from the same API budget
and publisher as everyone else's. Issue 37 asks that another namespace's status lag stay
within 1.2x of the same without the deletion.

One operator serves three namespaces: two "going" namespaces with ``GOING`` ScheduledJobs
each, every one with a run RUNNING (its Job created; no node, so its pod stays Pending and
its run is neither ended nor reaped), and the "staying" namespace, where a driver asks for
a run of a fresh ScheduledJob (a ``pgsched.dev/run-now`` annotation) every ``EVERY``
seconds. Measured for each staying run: its Job's arrival to its ScheduledJob's status
showing the run (``status.lastRun``), both seen by watches. Four phases in turn, so drift
hits both arms alike: quiet (the going namespaces stand), the first going namespace
deleted, quiet again, the second deleted. A deleting phase lasts until its namespace is
gone (at least as many runs as a quiet phase, at most ``POOL``); its runs then count.

No node: what is measured ends with a status patch, and a host-only control plane needs
no wait for the machine's node lock.
"""

from __future__ import annotations

import time
from typing import Any

from bench import kube
from bench.context import Context
from bench.report import Report
from bench.stats import median, percentile, ratio
from devenv.waiting import wait_for
from pgsched.k8s import names
from pgsched.k8s.client import api

NAME = "namespace_deletion"
TITLE = "another namespace's status lag while a namespace of running runs is deleted"
EVERY = 2.0  # seconds between the staying namespace's runs: a few requests a second, well within the budget
NEVER = "0 0 1 1 *"
# No pod runs, so no run heartbeats: the reaper must not end the going namespaces' runs
# (they must still be running when their namespace goes).
QUIET = {"timeoutSeconds": 3600, "orphanTimeoutSeconds": 3600}
PHASES = ("quiet", "deleting", "quiet", "deleting")


def sizes(quick: bool) -> tuple[int, int]:
    """ScheduledJobs with a running run per going namespace; runs per quiet phase."""
    return (10, 5) if quick else (200, 15)


def run(ctx: Context) -> Report:
    going, per_phase = sizes(ctx.quick)
    data = measure(ctx, going, per_phase)
    report = Report(NAME, TITLE, columns=["measure", "quiet", "deleting", "ratio"])
    report.data.update(data)
    quiet, deleting = data["lag"]["quiet"], data["lag"]["deleting"]
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        report.add(
            measure=f"staying namespace: Job -> status lastRun, {label} (s)",
            quiet=percentile(quiet, q),
            deleting=percentile(deleting, q),
            ratio=ratio(percentile(deleting, q), percentile(quiet, q)),
        )
    report.add(
        measure="staying runs measured",
        quiet=len(quiet),
        deleting=len(deleting),
        ratio="-",
    )
    report.add(
        measure=f"a going namespace ({going} running runs): delete -> gone (s)",
        quiet="-",
        deleting=" / ".join(f"{seconds:.1f}" for seconds in data["gone_after"]),
        ratio="-",
    )
    report.notes.append(
        f"{going} ScheduledJobs with a running run in each of 2 going namespaces; a staying run"
        f" every {EVERY:g} s; phases {', '.join(PHASES)}, each once the outbox was empty"
        f" (waited {', '.join(f'{s:.0f}' for s in data['drained_after'])} s); no node;"
        f" operator at its default API budget; median quiet lag {median(quiet):.2f} s"
    )
    report.floor(
        "staying status lag p99, deleting / quiet",
        ratio(percentile(deleting, 0.99), percentile(quiet, 0.99)),
        1.2,
        higher_is_better=False,
    )
    return report


def measure(ctx: Context, going: int, per_phase: int) -> dict[str, Any]:
    dsn = ctx.env.create_database("namespace_deletion")
    with kube.cluster(ctx, host_only=True) as bench:
        staying = bench.namespace
        doomed = [f"{staying}-going-{index}" for index in (1, 2)]
        setup = api.KubeApi.from_environment(
            qps=1000, burst=1000, kubeconfig=str(bench.control_plane.kubeconfig)
        )
        for namespace in doomed:
            setup.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        pool = per_phase * 3  # ScheduledJobs a deleting phase may use
        operator = bench.operator(dsn, namespaces=",".join([staying, *doomed]))
        watchers: list[kube.FirstSeen] = []
        try:
            steady = [f"steady-{index}" for index in range(pool * len(PHASES))]
            kube.create_scheduled_jobs(
                setup,
                staying,
                [kube.scheduled_job(name, NEVER, heartbeat=QUIET) for name in steady],
            )
            for namespace in doomed:  # each created with its run asked for
                kube.create_scheduled_jobs(
                    setup, namespace, [_busy(f"busy-{index}") for index in range(going)]
                )
            kube.wait_for_count(
                dsn,
                "SELECT count(*) AS n FROM pgsched.job_runs WHERE status = 'RUNNING'"
                " AND k8s_job_name IS NOT NULL",
                going * len(doomed),
                what="the going namespaces' runs launched",
                timeout=600,
                interval=1,
            )
            jobs = kube.JobArrivals(bench, staying).start()
            statuses = _status_watcher(bench, staying)
            watchers += [jobs, statuses]

            phases: list[tuple[str, list[str]]] = []
            gone_after: list[float] = []
            drained_after: list[float] = []
            unused = iter(steady)
            for phase in PHASES:
                # Each phase from an empty outbox: the set-up's launches, or the deletion
                # before, still being published would make a quiet phase anything but.
                drained_after.append(_drained(dsn))
                if phase == "quiet":
                    asked = [_ask(setup, staying, next(unused)) for _ in range(per_phase)]
                else:
                    namespace = doomed[len(gone_after)]
                    started = time.monotonic()
                    setup.delete(f"/api/v1/namespaces/{namespace}")
                    asked, gone = _ask_until_gone(
                        setup, staying, unused, namespace, per_phase, pool
                    )
                    gone_after.append(gone - started)
                phases.append((phase, asked))
            expected = [name for _, asked in phases for name in asked]
            _wait_seen(jobs, statuses, expected, timeout=600)
        finally:
            for watcher in watchers:
                watcher.stop()
            operator.stop()
    ctx.env.drop_databases()

    job_of = {job.rsplit("-", 1)[0]: job for job in jobs.times}  # one run per ScheduledJob
    lag: dict[str, list[float]] = {"quiet": [], "deleting": []}
    for phase, asked in phases:
        for name in asked:
            lag[phase].append(statuses.times[job_of[name]] - jobs.times[job_of[name]])
    return {
        "lag": lag,
        "gone_after": gone_after,
        "drained_after": drained_after,
        "going": going,
        "per_phase": per_phase,
    }


def _drained(dsn: str) -> float:
    """Seconds until the run-events outbox is empty (everything published)."""
    started = time.monotonic()
    kube.wait_for_count(
        dsn,
        "SELECT count(*) AS n FROM pgsched.run_events",
        0,
        what="the run-events outbox published",
        timeout=900,
        interval=1,
    )
    return time.monotonic() - started


def _busy(name: str) -> dict[str, Any]:
    """A ScheduledJob of a going namespace, its run asked for as it is created."""
    document = kube.scheduled_job(name, NEVER, heartbeat=QUIET)
    document["metadata"]["annotations"] = {names.ANNOTATION_RUN_NOW: "setup"}
    return document


def _ask(client: api.KubeApi, namespace: str, name: str) -> str:
    """A run of ``name`` asked for, then the driver's pause; returns the name."""
    client.merge_patch(
        api.scheduled_job_path(namespace, name),
        {"metadata": {"annotations": {names.ANNOTATION_RUN_NOW: "bench"}}},
    )
    time.sleep(EVERY)
    return name


def _ask_until_gone(
    client: api.KubeApi, staying: str, unused: Any, going: str, least: int, most: int
) -> tuple[list[str], float]:
    """Runs asked for in ``staying`` while ``going`` is being deleted: at least ``least``,
    then until it is gone (or ``most`` were asked). Returns them and when it was gone."""
    asked: list[str] = []
    gone: float | None = None
    while len(asked) < most and (gone is None or len(asked) < least):
        asked.append(_ask(client, staying, next(unused)))
        if gone is None and not _exists(client, going):
            gone = time.monotonic()
    while gone is None:  # the pool ran out first: wait for the namespace anyway
        time.sleep(0.5)
        if not _exists(client, going):
            gone = time.monotonic()
    return asked, gone


def _exists(client: api.KubeApi, namespace: str) -> bool:
    try:
        client.get(f"/api/v1/namespaces/{namespace}")
    except api.ApiError as error:
        if error.not_found:
            return False
        raise
    return True


def _status_watcher(bench: kube.Cluster, namespace: str) -> kube.FirstSeen:
    """When each ScheduledJob's status first showed a run: keyed as its Job is named."""
    from kubernetes import client

    def shows_a_run(event: dict[str, Any]) -> str | None:
        found = event["object"]
        last = (found.get("status") or {}).get("lastRun") or {}
        run_id = last.get("id")
        return names.job_name(found["metadata"]["name"], int(run_id)) if run_id else None

    return kube.FirstSeen(
        shows_a_run,
        client.CustomObjectsApi(kube.api_client(bench)).list_namespaced_custom_object,
        names.GROUP,
        names.VERSION,
        namespace,
        names.PLURAL,
    ).start()


def _wait_seen(
    jobs: kube.FirstSeen, statuses: kube.FirstSeen, expected: list[str], *, timeout: float
) -> None:
    """Until every asked run's Job and its status were seen."""

    def missing() -> list[str]:
        owners = {job.rsplit("-", 1)[0] for job in jobs.times if job in statuses.times}
        return [name for name in expected if name not in owners]

    wait_for(
        lambda: not missing(),
        timeout,
        describe=lambda: (
            f"every staying run's Job and status ({len(missing())} never showed: {missing()[:5]})"
        ),
    )
