"""Schedule-to-Job skew while every job's notifications go to a receiver that hangs
(the goal: "a slow or hostile receiver cannot slow the tick").

One control plane with a node, one database, one operator, the same ScheduledJobs
throughout: ``idle`` yearly ones and ``due`` every minute whose pods fail (``exit 3``, no
retries), so every run of the due jobs writes a ``failed`` notification. None of them has
spec.notify: the namespace's NotificationPolicy ``default`` names the receiver, a signed
Webhook (its key read from a Secret at each delivery), so the two arms differ by one
``kubectl apply`` of the policy and nothing restarts:

- **baseline**: the policy's receiver answers at once (``devenv.receiver``, 200);
- **hanging**: the policy names a receiver that takes every request and never answers
  (the notifier cuts each after its 10 s deadline, at most 2 in flight to that host, and
  retries with backoff: the outbox grows minute after minute).

Each arm measures ``minutes`` minute boundaries that start after the policy is in force,
as ``skew`` measures them: the Job's ``creationTimestamp`` and the moment a watch saw it,
minus its scheduled time, and the database's ``started_at - scheduled_for`` (the tick's
own figure, to the microsecond). Reported as hanging / baseline of the same run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import kube
from bench.context import Context
from bench.report import Report, pyplot, save_plot
from bench.skew import created_at, job_skews, seen_at, started_skews, wait_for_minutes
from bench.stats import median, percentile, ratio
from devenv.receiver import Receiver
from devenv.waiting import wait_for
from pgsched.db import connection

NAME = "notify_skew"
TITLE = "schedule-to-Job skew with every job notifying a hanging receiver"
SECRET = "pgsched-notify"
HANG_SECONDS = 3600.0  # longer than the benchmark: "never answers"


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE, columns=["measure", "hanging", "baseline", "baseline is", "ratio"])
    idle, due, minutes = (50, 5, 1) if ctx.quick else (1000, 20, 3)
    dsn = ctx.env.create_database("notify_skew")
    answering, hanging = Receiver().start(), Receiver(hang=HANG_SECONDS).start()
    arms: dict[str, dict[str, Any]] = {}
    try:
        with kube.cluster(ctx) as bench:
            bench.kubectl(
                "create", "secret", "generic", SECRET, "-n", bench.namespace,
                "--from-literal=hmac=bench-signing-key",
            )  # fmt: skip
            arrivals = kube.JobArrivals(bench, bench.namespace)
            operator = bench.operator(
                dsn,
                PGSCHED_API_QPS="100",
                PGSCHED_API_BURST="200",
                PGSCHED_NOTIFY_ALLOW="127.0.0.0/8",  # the receivers are on this machine
            )
            try:
                arrivals.start()
                bench.apply([policy(answering)])
                bench.apply([kube.scheduled_job(f"idle-{i}", "0 0 1 1 *") for i in range(idle)])
                bench.apply(
                    [
                        kube.scheduled_job(
                            f"due-{i}",
                            "* * * * *",
                            command="exit 3",
                            maxConcurrentRuns=5,
                            retryPolicy={"maxAttempts": 1},
                            # Every failed run's Job stays to be timed (the default keeps 1).
                            failedRunsHistoryLimit=100,
                        )
                        for i in range(due)
                    ]
                )
                kube.wait_for_definitions(dsn, idle + due, timeout=600)
                with connection.connect(dsn) as conn:
                    wait_for(
                        lambda: conn.execute(
                            "SELECT true AS found FROM pgsched.notification_policies"
                        ).fetchone(),
                        60,
                        describe="the NotificationPolicy stored",
                    )
                    arms["baseline"] = measure(bench, arrivals, conn, due=due, minutes=minutes)
                    bench.apply([policy(hanging)])
                    wait_for(
                        lambda: conn.execute(
                            "SELECT true AS found FROM pgsched.notification_policies"
                            " WHERE notify->'targets'->0->>'url' = %s",
                            [hanging.url],
                        ).fetchone(),
                        60,
                        describe="the hanging receiver's policy stored",
                    )
                    arms["hanging"] = measure(bench, arrivals, conn, due=due, minutes=minutes)
                    outbox = conn.execute(
                        "SELECT state, count(*) AS n, sum(attempts) AS attempts"
                        " FROM pgsched.notifications GROUP BY state ORDER BY state"
                    ).fetchall()
            finally:
                arrivals.stop()
                operator.stop()
    finally:
        answering.stop()
        hanging.stop()
    ctx.env.drop_databases()
    expected = due * minutes
    for arm, found in arms.items():
        report.notes.append(
            f"{arm}: {len(found['created'])} of {expected} Jobs of {minutes} minute(s)"
            f" ({found['first']:%H:%M}-{found['last']:%H:%M} UTC)"
        )
    report.notes.append(
        f"{idle} idle + {due} due ScheduledJobs (pods exit 3, no retries), one"
        f" NotificationPolicy; the answering receiver took {len(answering.received())}"
        f" requests, the hanging one {len(hanging.received())} (none answered). Outbox at the"
        " end: "
        + ", ".join(f"{row['state']} {row['n']} ({row['attempts']} attempts)" for row in outbox)
    )
    for key, label in (
        ("started", "started_at - scheduled_for (s, database clock)"),
        ("seen", "Job seen by a watch (s)"),
        ("created", "Job creationTimestamp (s)"),
    ):
        for name, fraction in (("p50", 0.5), ("p99", 0.99)):
            mine = percentile(arms["hanging"][key], fraction)
            base = percentile(arms["baseline"][key], fraction)
            report.add(
                measure=f"skew {name}, {label}",
                hanging=mine,
                baseline=base,
                **{"baseline is": "answering receiver", "ratio": ratio(mine, base)},
            )
    report.data = {
        arm: {k: v for k, v in found.items() if k in ("started", "seen", "created")}
        for arm, found in arms.items()
    }
    report.floor(
        "skew p99 with a hanging receiver (s, Job creationTimestamp)",
        percentile(arms["hanging"]["created"], 0.99),
        2.0,
        higher_is_better=False,
    )
    report.floor(
        "Jobs created with a hanging receiver / expected",
        len(arms["hanging"]["created"]) / expected,
        1.0,
    )
    if ctx.plots:
        report.plots.append(plot(report.data, ctx.out_dir))
    return report


def policy(receiver: Receiver) -> dict[str, Any]:
    return {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "NotificationPolicy",
        "metadata": {"name": "default"},
        "spec": {
            "targets": [
                {
                    "name": "team",
                    "type": "Webhook",
                    "url": receiver.url,
                    "signingSecretRef": {"name": SECRET, "key": "hmac"},
                }
            ]
        },
    }


def measure(
    bench: kube.Cluster,
    arrivals: kube.JobArrivals,
    conn: connection.Connection,
    *,
    due: int,
    minutes: int,
) -> dict[str, Any]:
    """The skews of the due jobs' Jobs over the next ``minutes`` whole minutes."""
    first, last = wait_for_minutes(minutes)
    expected = due * minutes
    deadline = time.monotonic() + 45
    while True:
        jobs = bench.jobs()
        created, _ = job_skews(jobs, first, last, created=created_at)
        seen = all(job["metadata"]["name"] in arrivals.wall for job in jobs)
        if (len(created) >= expected and seen) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    seen_skews, _ = job_skews(
        [job for job in jobs if job["metadata"]["name"] in arrivals.wall],
        first,
        last,
        created=lambda job: seen_at(arrivals, job),
    )
    started = started_skews(conn, first, last)
    return {
        "created": created,
        "seen": seen_skews,
        "started": started,
        "first": first,
        "last": last,
    }


def plot(data: dict[str, Any], out_dir: Path) -> str:
    """CDFs of started_at - scheduled_for, with the answering and the hanging receiver."""
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(6, 4))
    for arm, color in (("baseline", "tab:green"), ("hanging", "tab:red")):
        values = sorted(data[arm]["started"])
        if values:
            axis.step(
                values,
                [(i + 1) / len(values) for i in range(len(values))],
                label=f"{arm} (median {median(values):.3f} s)",
                color=color,
                where="post",
            )
    axis.set_xlabel("started_at - scheduled_for (s)")
    axis.set_ylabel("fraction of runs")
    axis.set_title("skew with the policy's receiver answering vs hanging")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    return save_plot(fig, out_dir, NAME)
