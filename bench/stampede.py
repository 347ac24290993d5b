"""A stampede: 5,000 ScheduledJobs on ``0 * * * *`` due at the same second.

5,000 ScheduledJobs on ``0 * * * *`` (no ``H``: every one due at the top of the hour) and
20 unrelated one-shot jobs (``runAt``) due one after another while the stampede drains.
Rather than waiting for a real top of the hour, the operator runs with its engine clock
shifted (``devenv/shifted_clock``, as the cluster tests pin "now"): the ScheduledJobs are
created and stored while the next top of the hour is far, then the clock is moved to five
seconds before it. So the due instant is one second for all 5,000.

Baseline, in the same run on the same API server and before the stampede: a plain client
(the same ``KubeApi`` class, the same QPS and burst as the operator, the same builders)
creates what the launcher creates for 5,000 runs, each run's lease Secret then its Job, one
by one in another namespace. Every Job on both sides is timed by a watch on its namespace.

Measured: due instant to the first and to the last of the 5,000 Jobs, next to the plain
client's start to its first and last Job (the ratio is the plain client's time over ours:
1.0 is as fast); the 20 unrelated jobs' skew (their Job seen minus their ``runAt``); how long
their ScheduledJob's status (``lastRun``) and their RunLaunched Event took after their Job,
while the stampede's own statuses and Events queue for their share of the API budget; how
many Events were posted while the Jobs were being created, and when the last of all runs'
RunLaunched Events was (the outbox drained); the operator's RSS before and at its peak.

No node: a single node cannot run 5,000 pods, and what is measured ends when a Job exists.
The Job controller still creates each Job's pod (Pending, unschedulable) on both sides.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import devenv
from bench import kube
from bench.context import Context
from bench.report import Report, pyplot, save_plot
from bench.stats import median, percentile, ratio
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.engine import definitions
from pgsched.k8s import names
from pgsched.k8s.client import api

NAME = "stampede"
TITLE = "5,000 ScheduledJobs due at the same second vs a plain client"
QPS = 200.0
BURST = 400
OTHERS_LABEL = "bench.pgsched.dev/other"
CLOCK = Path(devenv.__file__).parent / "shifted_clock"
AHEAD = 5.0  # seconds between moving the clock and the due instant
SETUP_START = 300  # the engine's clock during the set-up starts this many seconds past an hour
# No pod runs, so no run heartbeats: keep the reaper from failing (and retrying) runs whose
# Job exists while a slow machine still drains the stampede.
QUIET = {"timeoutSeconds": 3600, "orphanTimeoutSeconds": 3600}


def run(ctx: Context) -> Report:
    count, others = (100, 5) if ctx.quick else (5000, 20)
    report = Report(NAME, TITLE, columns=["measure", "pgsched", "baseline", "baseline is", "ratio"])
    data = measure(ctx, count, others)
    report.data.update(data)
    ours, plain = data["ours"], data["plain"]
    for label, index in (("first", 0), ("last", -1)):
        report.add(
            measure=f"due instant to the {label} of {count} Jobs (s)",
            pgsched=ours[index],
            baseline=plain[index],
            **{
                "baseline is": "plain client, from its start",
                "ratio": ratio(plain[index], ours[index]),
            },
        )
    ours_rate = kube.jobs_per_second(ours)
    plain_rate = kube.jobs_per_second(plain)
    report.add(
        measure="Jobs/s, first to last Job",
        pgsched=ours_rate,
        baseline=plain_rate,
        **{"baseline is": "plain client", "ratio": ratio(ours_rate, plain_rate)},
    )
    skews = data["others_skew"]
    report.add(
        measure=f"{others} other jobs due during it: skew p50 / p99 (s)",
        pgsched=f"{median(skews):.2f} / {percentile(skews, 0.99):.2f}",
        baseline="-",
        **{"baseline is": "-", "ratio": "-"},
    )
    for what in ("status", "event"):
        late = data[f"others_{what}"]
        report.add(
            measure=f"other jobs: {'status lastRun' if what == 'status' else 'RunLaunched Event'}"
            f" after their Job, p50 / max (s; {len(late)} of {others} seen)",
            pgsched=f"{median(late):.1f} / {max(late, default=float('nan')):.1f}",
            baseline="-",
            **{"baseline is": "-", "ratio": "-"},
        )
    report.add(
        measure="operator RSS before / peak during the stampede (MiB)",
        pgsched=f"{data['rss_before']:.0f} / {data['rss_peak']:.0f}",
        baseline="-",
        **{"baseline is": "-", "ratio": ratio(data["rss_peak"], data["rss_before"])},
    )
    report.notes.append(
        f"{count} ScheduledJobs on '0 * * * *' stored in {data['setup_seconds']:.0f}s;"
        f" operator and plain client at {QPS:g} qps / burst {BURST}, dispatch batch 50"
        f" (default), no node; {data['events_during']} RunLaunched Events posted while the"
        f" {count} Jobs were created, all {data['events_total']} by"
        f" {data['events_done']:.0f}s after the due instant"
    )
    report.floor("due to last Job, plain client / pgsched", ratio(plain[-1], ours[-1]), 0.95)
    report.floor("other jobs' skew p99 (s)", percentile(skews, 0.99), 2.0, higher_is_better=False)
    if ctx.plots:
        report.plots.append(plot(report.data, ctx.out_dir))
    return report


def measure(ctx: Context, count: int, others: int) -> dict[str, Any]:
    dsn = ctx.env.create_database("stampede")
    with kube.cluster(ctx, host_only=True, plain=True) as bench:
        clock_file = bench.work_dir / "clock-offset"
        # The set-up must not cross a top of the hour on the engine's clock: the
        # ScheduledJobs would be due then, or — if the stampede were moved to the hour
        # after — the engine would catch that earlier occurrence up the moment the clock
        # moves (a smoke run started at 17:58 saw its Jobs before the due instant). So the
        # engine's clock starts at five past an hour, whatever the time: 55 minutes of
        # set-up before the next top of the hour, the stampede's due instant.
        now = datetime.now(UTC)
        start_offset = float(SETUP_START - (now.minute * 60 + now.second))
        clock_file.write_text(repr(start_offset))
        operator = bench.operator(
            dsn,
            PGSCHED_API_QPS=f"{QPS:g}",
            PGSCHED_API_BURST=str(BURST),
            PYTHONPATH=os.pathsep.join(p for p in (str(CLOCK), os.environ.get("PYTHONPATH")) if p),
            SHIFTED_CLOCK_FILE=str(clock_file),
        )
        setup = api.KubeApi.from_environment(
            qps=1000, burst=1000, kubeconfig=str(bench.control_plane.kubeconfig)
        )
        watchers: list[kube.FirstSeen] = []
        try:
            # The top of the hour the stampede is due at: the next one on the engine clock.
            engine_now = datetime.now(UTC) + timedelta(seconds=start_offset)
            due = engine_now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            drain = 2 * count / QPS  # the plain client's time, about
            other_due = {
                f"other-{k}": due + timedelta(seconds=1 + int(k * drain / others))
                for k in range(others)
            }
            started = time.monotonic()
            kube.create_scheduled_jobs(
                setup,
                bench.namespace,
                [
                    kube.scheduled_job(f"hourly-{i}", "0 * * * *", heartbeat=QUIET)
                    for i in range(count)
                ],
            )
            kube.create_scheduled_jobs(
                setup,
                bench.namespace,
                [_one_shot(name, at) for name, at in other_due.items()],
            )
            kube.wait_for_definitions(dsn, count + others, timeout=3600)
            setup_seconds = time.monotonic() - started
            with connection.connect(dsn) as conn:
                definition = definitions.find(conn, bench.namespace, "hourly-0")
            assert definition is not None
            time.sleep(3 if ctx.quick else 15)  # the operator's start-up statuses settle

            plain = kube.JobArrivals(bench, bench.plain_namespace).start()
            watchers.append(plain)
            plain_started = time.monotonic()
            kube.create_plain_jobs(
                bench,
                definition,
                count,
                namespace=bench.plain_namespace,
                qps=QPS,
                burst=BURST,
                run_api=operator.run_api,
            )
            plain_times = [at - plain_started for at in plain.wait(count, 600)]
            time.sleep(3 if ctx.quick else 10)

            jobs = kube.JobArrivals(bench, bench.namespace).start()
            statuses, events = _status_and_event_watchers(bench, set(other_due))
            watchers += [jobs, statuses, events]
            memory = _RssSampler(operator.pid).start()
            # Move the engine clock to AHEAD seconds before the due instant.
            offset = (due - datetime.now(UTC)).total_seconds() - AHEAD
            due_monotonic = time.monotonic() + AHEAD
            clock_file.write_text(repr(offset))
            jobs.wait(count + others, 600)
            last_job = max(jobs.times.values())
            wait_for(
                lambda: all(name in statuses.times for name in other_due),
                600,
                describe=lambda: f"the other jobs' statuses ({len(statuses.times)} seen)",
            )
            # The other jobs go first (k8s/reporting/publisher.py, "Fair turns"): the stampede's own
            # Events come after theirs; wait for all of them to time the whole outbox.
            wait_for(
                lambda: len(events.times) >= count + others,
                600,
                describe=lambda: f"every RunLaunched Event ({len(events.times)} seen)",
            )
            memory.stop()
            rss_before = memory.samples[0] if memory.samples else float("nan")
            time.sleep(2)
        finally:
            for watcher in watchers:
                watcher.stop()
            operator.stop()
    ctx.env.drop_databases()

    first_job: dict[str, float] = {}  # per ScheduledJob (a Job is <name>-<run id>)
    for job, at in jobs.times.items():
        owner = job.rsplit("-", 1)[0]
        first_job[owner] = min(at, first_job.get(owner, at))
    ours = sorted(
        at - due_monotonic for owner, at in first_job.items() if owner.startswith("hourly-")
    )
    other_jobs = {name: first_job[name] for name in other_due}
    skews = [
        other_jobs[name] - (due_monotonic + (at - due).total_seconds())
        for name, at in other_due.items()
    ]
    event_times = sorted(events.times.values())
    return {
        "ours": ours,
        "plain": plain_times,
        "others_skew": skews,
        "others_at": sorted(at - due_monotonic for at in other_jobs.values()),
        "others_status": [
            statuses.times[n] - other_jobs[n] for n in other_due if n in statuses.times
        ],
        "others_event": [events.times[n] - other_jobs[n] for n in other_due if n in events.times],
        "events_during": sum(1 for at in event_times if at <= last_job),
        "events_total": len(event_times),
        "events_done": (event_times[-1] - due_monotonic) if event_times else float("nan"),
        "rss_before": rss_before,
        "rss_peak": max(memory.samples, default=float("nan")),
        "setup_seconds": setup_seconds,
    }


def _one_shot(name: str, at: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "labels": {OTHERS_LABEL: "true"}},
        "spec": {
            "runAt": at.isoformat(),
            "heartbeat": QUIET,
            "jobTemplate": kube.job_template("true"),
        },
    }


def _status_and_event_watchers(
    bench: kube.Cluster, others: set[str]
) -> tuple[kube.FirstSeen, kube.FirstSeen]:
    """When each other job's status first showed a run, and its RunLaunched Event appeared
    (the Event watch times every RunLaunched, the stampede's too, keyed by Event name)."""
    from kubernetes import client

    official = kube.api_client(bench)

    def status_shows_a_run(event: dict[str, Any]) -> str | None:
        found = event["object"]
        last = (found.get("status") or {}).get("lastRun") or {}
        return str(found["metadata"]["name"]) if last.get("id") else None

    def run_started(event: dict[str, Any]) -> str | None:
        found = event["object"]
        if event["type"] != "ADDED" or found.reason != "RunLaunched":
            return None
        subject = found.involved_object.name
        return str(subject) if subject in others else str(found.metadata.name)

    statuses = kube.FirstSeen(
        status_shows_a_run,
        client.CustomObjectsApi(official).list_namespaced_custom_object,
        names.GROUP,
        names.VERSION,
        bench.namespace,
        names.PLURAL,
        label_selector=OTHERS_LABEL,
    )
    events = kube.FirstSeen(
        run_started,
        client.CoreV1Api(official).list_namespaced_event,
        bench.namespace,
        field_selector="reason=RunLaunched",
    )
    return statuses.start(), events.start()


class _RssSampler:
    """The operator's resident memory every quarter second (MiB)."""

    def __init__(self, pid: int) -> None:
        self._status = Path(f"/proc/{pid}/status")
        self.samples: list[float] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stopped.wait(0.25):
            for line in self._status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.samples.append(int(line.split()[1]) / 1024)

    def start(self) -> _RssSampler:
        for line in self._status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                self.samples.append(int(line.split()[1]) / 1024)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)


def plot(data: dict[str, Any], out_dir: Path) -> str:
    """Jobs created over time on both sides, with the other jobs' Jobs marked."""
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(8, 4.5))
    ours, plain = data["ours"], data["plain"]
    axis.plot(
        ours, range(1, len(ours) + 1), label="pgsched, from the due instant", color="tab:green"
    )
    axis.plot(
        plain, range(1, len(plain) + 1), label="plain client, from its start", color="tab:grey"
    )
    others = data["others_at"]
    axis.scatter(
        others,
        [sum(1 for at in ours if at <= other) for other in others],
        marker="o",
        color="tab:red",
        zorder=3,
        label=f"the {len(others)} other jobs' Jobs",
    )
    axis.set_xlabel("seconds")
    axis.set_ylabel("Jobs created")
    axis.set_title(f"{len(ours)} ScheduledJobs due at the same second")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    return save_plot(fig, out_dir, NAME)
