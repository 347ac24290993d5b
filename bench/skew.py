"""Schedule-to-Job skew next to built-in CronJobs, and a burst of due runs.

**Skew.** 1,000 idle ScheduledJobs (yearly) plus 20 due every minute, and 20 CronJobs with
the same schedule and template in the same cluster, for a few minute boundaries. For each
Job: ``creationTimestamp - scheduled time`` (pgsched's ``pgsched.dev/scheduled-for``
annotation; the CronJob controller's ``batch.kubernetes.io/cronjob-scheduled-timestamp``).
Kubernetes timestamps have one-second resolution, so each Job is also timed when a watch
on the namespace first sees it (same machine, same clock: milliseconds), and the
database's ``started_at - scheduled_for`` is reported beside them. Floor: p99 ≤ 2 s and
not worse than CronJob.

**First instruction.** The same Jobs' pods, on the same node, to the moment their workload
ran its first instruction: the container's command (pgsched keeps a shell command as it
is, beside its heartbeat sidecar, which kubelet starts first and which must be listening
before the workload starts: that start-up is part of pgsched's figure) prints
``/proc/uptime``, the kernel's boot-time clock, which the node's containers share with
the host. Read from each pod's log once it has ended and put on the host's wall clock,
minus the scheduled time. Floor: every pgsched workload started and read.

**Burst.** 1,000 runs due at the same instant, whose pods no node takes (on a control plane
without a node; on a given cluster, by a nodeSelector no node matches), so none runs: Jobs
created per second by the operator, next to a plain client creating the same 1,000 Job
manifests one by one with the same rate-limited API client. Each side is timed by a watch
on its own namespace. Floor: ≥ 80% of the plain client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import kube
from bench.context import Context
from bench.report import Report, pyplot, save_plot
from bench.stats import median, percentile, ratio
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.engine import definitions
from pgsched.k8s import names

NAME = "skew"
TITLE = "schedule-to-Job skew vs CronJob, and a burst of 1,000 due runs"
SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
BURST_QPS = "200"
BURST_BURST = "400"
# The due jobs' workload, both sides: its first instruction reads the boot-time clock (the
# kernel's, shared by the host and the node's containers: no time namespace), which
# /proc/uptime truncates to hundredths of a second.
FIRST_INSTRUCTION = "cat /proc/uptime"
UPTIME_RESOLUTION = 0.01
WORKLOAD = "main"  # the container kube.job_template names
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # on the pods of a Job, by the Job controller


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE, columns=["measure", "pgsched", "baseline", "baseline is", "ratio"])
    skew(ctx, report)
    burst(ctx, report)
    if ctx.plots:
        report.plots.append(plot(report.data, ctx.out_dir))
    return report


def plot(data: dict[str, Any], out_dir: Path) -> str:
    """CDFs of skew (pgsched vs CronJob, by a watch) and of the workload's first instruction,
    and the burst's Jobs over time."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label, color, style in (
        ("pgsched_seen", "pgsched, Job seen", "tab:green", "-"),
        ("cronjob_seen", "CronJob, Job seen", "tab:blue", "-"),
        ("pgsched_first_instruction", "pgsched, first instruction", "tab:green", "--"),
        ("cronjob_first_instruction", "CronJob, first instruction", "tab:blue", "--"),
    ):
        values = sorted(data["skew"][key])
        if values:
            left.step(
                values,
                [(i + 1) / len(values) for i in range(len(values))],
                label=label,
                color=color,
                linestyle=style,
                where="post",
            )
    left.set_xlabel("seconds after the scheduled time")
    left.set_ylabel("fraction of Jobs")
    left.set_title("Job seen by a watch, and its workload's first instruction")
    for key, label, color in (
        ("pgsched", "pgsched (from the due instant)", "tab:green"),
        ("plain", "plain client (from its first Job)", "tab:grey"),
    ):
        times = data["burst"][key]
        right.plot(times, range(1, len(times) + 1), label=label, color=color)
    right.set_xlabel("seconds")
    right.set_ylabel("Jobs created")
    right.set_title(f"burst of {len(data['burst']['pgsched'])} runs due at once")
    for axis in (left, right):
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    return save_plot(fig, out_dir, NAME)


def skew(ctx: Context, report: Report) -> None:
    idle, due, minutes = (50, 5, 1) if ctx.quick else (1000, 20, 3)
    dsn = ctx.env.create_database("skew")
    with kube.cluster(ctx) as bench:
        arrivals = kube.JobArrivals(bench, bench.namespace)
        operator = bench.operator(dsn, PGSCHED_API_QPS="100", PGSCHED_API_BURST="200")
        try:
            arrivals.start()
            bench.apply([kube.scheduled_job(f"idle-{i}", "0 0 1 1 *") for i in range(idle)])
            bench.apply(
                [
                    kube.scheduled_job(
                        f"due-{i}",
                        "* * * * *",
                        FIRST_INSTRUCTION,
                        maxConcurrentRuns=5,
                        # Every measured run's pod stays to be read (the default keeps 3),
                        # as the CronJobs keep 100.
                        successfulRunsHistoryLimit=100,
                    )
                    for i in range(due)
                ]
            )
            bench.apply(
                [kube.cron_job(f"cron-{i}", "* * * * *", FIRST_INSTRUCTION) for i in range(due)]
            )
            kube.wait_for_definitions(dsn, idle + due, timeout=600)
            first, last = wait_for_minutes(minutes)
            all_jobs = _created_by_both(bench, arrivals, first, last, due * minutes, slack=45)
            instructions = first_instructions(
                bench, [job for job, _, _ in measured_jobs(all_jobs, first, last)], timeout=120
            )
            with connection.connect(dsn) as conn:
                precise = started_skews(conn, first, last)
        finally:
            arrivals.stop()
            operator.stop()
    ctx.env.drop_databases()
    ours, theirs = job_skews(all_jobs, first, last, created=created_at)
    seen_ours, seen_theirs = job_skews(
        all_jobs, first, last, created=lambda job: seen_at(arrivals, job)
    )
    first_ours, first_theirs = job_skews(
        [job for job in all_jobs if job["metadata"]["name"] in instructions],
        first,
        last,
        created=lambda job: instructions[job["metadata"]["name"]].ran,
    )
    after_start = [
        (found.ran - found.container_started).total_seconds() for found in instructions.values()
    ]
    report.data["skew"] = {
        "pgsched": ours,
        "cronjob": theirs,
        "pgsched_seen": seen_ours,
        "cronjob_seen": seen_theirs,
        "pgsched_started_at": precise,
        "pgsched_first_instruction": first_ours,
        "cronjob_first_instruction": first_theirs,
        "first_instruction_after_container_start": after_start,
    }
    expected = due * minutes
    report.notes.append(
        f"{idle} idle + {due} due ScheduledJobs and {due} CronJobs, {minutes} minute(s):"
        f" {len(ours)} pgsched Jobs and {len(theirs)} CronJob Jobs (expected {expected} each);"
        f" the first instruction of {len(first_ours)} and {len(first_theirs)} of their"
        f" workloads read ({FIRST_INSTRUCTION!r}, {UPTIME_RESOLUTION:g} s resolution)"
    )
    if after_start:
        report.notes.append(
            f"the first instructions read lie {min(after_start):.2f} to {max(after_start):.2f} s"
            f" (median {median(after_start):.2f}) after kubelet's startedAt of their container,"
            " which has whole seconds: about 0 to 1 s, as when the container reads the host's"
            " clock (an offset would move them all)"
        )
    compare(report, "skew {}, Job creationTimestamp (s)", ours, theirs)
    compare(report, "skew {}, Job seen by a watch (s)", seen_ours, seen_theirs)
    compare(
        report, "due instant to the workload's first instruction {} (s)", first_ours, first_theirs
    )
    report.add(
        measure="skew p50 / p99, started_at (s, database clock)",
        pgsched=f"{median(precise):.3f} / {percentile(precise, 0.99):.3f}",
        baseline="-",
        **{"baseline is": "-", "ratio": "-"},
    )
    report.floor("pgsched skew p99 (s)", percentile(ours, 0.99), 2.0, higher_is_better=False)
    report.floor(
        "pgsched p99 minus CronJob p99 (s)",
        percentile(ours, 0.99) - percentile(theirs, 0.99),
        0.0,
        higher_is_better=False,
    )
    report.floor("pgsched Jobs created / expected", len(ours) / expected, 1.0)
    report.floor("pgsched workloads started and read / expected", len(first_ours) / expected, 1.0)


def compare(report: Report, measure: str, ours: list[float], theirs: list[float]) -> None:
    """Rows of p50 and p99 of pgsched's and the CronJobs' figures (``measure`` names the
    percentile where its ``{}`` is)."""
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        mine, base = percentile(ours, fraction), percentile(theirs, fraction)
        report.add(
            measure=measure.format(label),
            pgsched=mine,
            baseline=base,
            **{"baseline is": "CronJob", "ratio": ratio(mine, base)},
        )


@dataclass(frozen=True)
class FirstInstruction:
    ran: datetime  # the workload's reading, on the host's wall clock
    # kubelet's startedAt of its container, in whole seconds: the reading lies about 0 to
    # 1 s after it when the container and the host read one clock (a little before it, or
    # more than 1 s after, when the node is slow to record the start or to run the shell).
    container_started: datetime


def first_instructions(
    bench: kube.Cluster, jobs: list[dict[str, Any]], *, timeout: float
) -> dict[str, FirstInstruction]:
    """When each Job's workload ran its first instruction, by Job name: its pod's log holds
    :data:`FIRST_INSTRUCTION`'s reading of the boot-time clock. The logs are read once every
    workload has ended (so reading them takes no core from a pod still starting), or after
    ``timeout`` seconds, of those that have."""
    wanted = {job["metadata"]["name"] for job in jobs}
    deadline = time.monotonic() + timeout
    while True:
        pods = bench.control_plane.api.get(f"/api/v1/namespaces/{bench.namespace}/pods")
        ended = {
            pod["metadata"]["labels"][JOB_NAME_LABEL]: (pod["metadata"]["name"], started)
            for pod in pods["items"]
            if pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL) in wanted
            and (started := ended_workload_start(pod)) is not None
        }
        if len(ended) == len(wanted) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    found = {}
    for job, (pod, started) in ended.items():
        log = bench.control_plane.pod_logs(bench.namespace, pod, WORKLOAD)
        if log.strip():  # empty: a workload that could not start at all, not timed
            found[job] = FirstInstruction(on_wall_clock(float(log.split()[0])), started)
    return found


def ended_workload_start(pod: dict[str, Any]) -> datetime | None:
    """When the pod's workload container started, if it has ended."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        ended = status.get("state", {}).get("terminated")
        if status["name"] == WORKLOAD and ended is not None and ended.get("startedAt"):
            return datetime.fromisoformat(ended["startedAt"].replace("Z", "+00:00"))
    return None


def on_wall_clock(uptime: float) -> datetime:
    """A reading of ``/proc/uptime`` as a moment of the host's wall clock: the middle of the
    hundredth it truncates to, plus what the wall clock reads beyond the boot-time clock."""
    offset = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return datetime.fromtimestamp(uptime + UPTIME_RESOLUTION / 2 + offset, UTC)


def burst(ctx: Context, report: Report) -> None:
    count = 100 if ctx.quick else 1000
    dsn = ctx.env.create_database("burst")
    with kube.cluster(ctx, node=False, plain=True) as bench:
        operator = bench.operator(
            dsn,
            PGSCHED_API_QPS=BURST_QPS,
            PGSCHED_API_BURST=BURST_BURST,
            PGSCHED_DISPATCH_BATCH="200",
        )
        ours = plain = None
        try:
            bench.apply(
                [unplaced(kube.scheduled_job("burst", "0 0 1 1 *", maxConcurrentRuns=count))]
            )
            ours = kube.JobArrivals(bench, bench.namespace).start()
            with connection.connect(dsn) as conn:
                definition = wait_for(
                    lambda: definitions.find(conn, bench.namespace, "burst"),
                    60,
                    describe="the definition",
                )
                # A whole second, like every real schedule's occurrences.
                due_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
                due_monotonic = time.monotonic() + (due_at - datetime.now(UTC)).total_seconds()
                conn.execute(
                    "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, request_token)"
                    " SELECT %s, 'QUEUED', 'manual', %s, 'burst-' || g FROM generate_series(1, %s) g",
                    [definition.id, due_at, count],
                )
            our_arrivals = ours.wait(count, 600)
            time.sleep(5)  # let the publisher catch up, so the baseline runs on a quiet server
            plain = kube.JobArrivals(bench, bench.plain_namespace).start()
            kube.create_plain_jobs(
                bench,
                definition,
                count,
                namespace=bench.plain_namespace,
                qps=float(BURST_QPS),
                burst=int(BURST_BURST),
                run_api=operator.run_api,
            )
            plain_arrivals = plain.wait(count, 600)
        finally:
            for watcher in (ours, plain):
                if watcher is not None:
                    watcher.stop()
            operator.stop()
    ctx.env.drop_databases()
    ours_rate = kube.jobs_per_second(our_arrivals)
    plain_rate = kube.jobs_per_second(plain_arrivals)
    report.add(
        measure=f"burst: {count} due at once, Jobs/s (first to last Job)",
        pgsched=ours_rate,
        baseline=plain_rate,
        **{"baseline is": "plain client", "ratio": ratio(ours_rate, plain_rate)},
    )
    report.add(
        measure=f"burst: due instant to the first / last of {count} Jobs (s)",
        pgsched=f"{our_arrivals[0] - due_monotonic:.2f} / {our_arrivals[-1] - due_monotonic:.2f}",
        baseline="-",
        **{"baseline is": "-", "ratio": "-"},
    )
    report.data["burst"] = {
        "pgsched": [at - due_monotonic for at in our_arrivals],
        "plain": [at - plain_arrivals[0] for at in plain_arrivals],
    }
    report.notes.append(
        f"burst: both at {BURST_QPS} qps / burst {BURST_BURST}, no pod placed; each"
        " side timed by a watch on its own namespace, Jobs/s from the first Job seen to the"
        " last; the plain client creates the same manifests (each run's lease Secret, then its"
        " Job) one by one, after the operator's burst, with the same client class and limits"
    )
    report.floor("burst Jobs/s vs plain client", ratio(ours_rate, plain_rate), 0.8)


def unplaced(scheduled_job: dict[str, Any]) -> dict[str, Any]:
    """The ScheduledJob with pods no node takes (:data:`kube.NOWHERE`): the burst times the
    creation of its Jobs alone, on a given cluster with a node too."""
    pod_spec = scheduled_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod_spec["nodeSelector"] = kube.NOWHERE
    return scheduled_job


def wait_for_minutes(minutes: int) -> tuple[datetime, datetime]:
    """Sleep through the next ``minutes`` whole minutes that start at least 5 s from now
    (so everything set up before is in place); their first and last minute boundaries."""
    first = next_minute(datetime.now(UTC) + timedelta(seconds=5))
    last = first + timedelta(minutes=minutes - 1)
    time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds()))
    return first, last


def started_skews(conn: connection.Connection, first: datetime, last: datetime) -> list[float]:
    """``started_at - scheduled_for`` of the scheduled runs due from ``first`` to ``last``:
    the tick's own figure, on the database clock."""
    return [
        (row["started_at"] - row["scheduled_for"]).total_seconds()
        for row in conn.execute(
            "SELECT started_at, scheduled_for FROM pgsched.job_runs"
            " WHERE trigger = 'schedule' AND started_at IS NOT NULL"
            " AND scheduled_for BETWEEN %s AND %s",
            [first, last],
        )
    ]


def _created_by_both(
    bench: kube.Cluster,
    arrivals: kube.JobArrivals,
    first: datetime,
    last: datetime,
    expected: int,
    *,
    slack: float,
) -> list[dict[str, Any]]:
    """The Jobs, once both pgsched and the CronJob controller have created all ``expected``
    Jobs of the minutes measured and the watch has seen each, or after ``slack`` seconds
    (then the floor on Jobs created says what is missing)."""
    deadline = time.monotonic() + slack
    while True:
        all_jobs = bench.jobs()
        ours, theirs = job_skews(all_jobs, first, last, created=created_at)
        seen = all(job["metadata"]["name"] in arrivals.wall for job in all_jobs)
        if (len(ours) >= expected and len(theirs) >= expected and seen) or (
            time.monotonic() > deadline
        ):
            return all_jobs
        time.sleep(1.0)


def job_skews(
    items: list[dict[str, Any]],
    first: datetime,
    last: datetime,
    *,
    created: Callable[[dict[str, Any]], datetime],
) -> tuple[list[float], list[float]]:
    """``created(job)`` minus the scheduled time, of pgsched's Jobs and of the CronJobs'."""
    ours: list[float] = []
    theirs: list[float] = []
    for job, scheduled, by_pgsched in measured_jobs(items, first, last):
        (ours if by_pgsched else theirs).append((created(job) - scheduled).total_seconds())
    return ours, theirs


def measured_jobs(
    items: list[dict[str, Any]], first: datetime, last: datetime
) -> list[tuple[dict[str, Any], datetime, bool]]:
    """The Jobs of pgsched and of the CronJob controller scheduled from ``first`` to
    ``last``: each with its scheduled time and whether pgsched made it."""
    measured = []
    for job in items:
        annotations = job["metadata"].get("annotations") or {}
        if names.ANNOTATION_SCHEDULED_FOR in annotations:
            scheduled = datetime.fromisoformat(annotations[names.ANNOTATION_SCHEDULED_FOR])
            by_pgsched = True
        elif SCHEDULED_ANNOTATION in annotations:
            scheduled = datetime.fromisoformat(
                annotations[SCHEDULED_ANNOTATION].replace("Z", "+00:00")
            )
            by_pgsched = False
        else:
            continue
        if first <= scheduled <= last:
            measured.append((job, scheduled, by_pgsched))
    return measured


def seen_at(arrivals: kube.JobArrivals, job: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(arrivals.wall[job["metadata"]["name"]], UTC)


def created_at(job: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(job["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
