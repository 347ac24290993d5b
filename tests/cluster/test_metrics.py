"""The operator's /metrics after real scenarios, and its JSON logs about runs.

Each test runs real operator processes against the local control plane and scrapes their
metrics endpoint (``OperatorProcess.metrics()``), parsing it with prometheus-client's own
parser, so a metric that is declared but never emitted, or emitted with other labels, fails.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devenv.waiting import wait_for
from pgsched.k8s.client.finalizers import FINALIZER
from plugins.operator import busybox
from plugins.postgres import terminate_backends

pytestmark = pytest.mark.cluster

NEVER = "0 0 1 1 *"


def samples(*replicas) -> list[tuple[str, dict[str, str], float]]:
    found = []
    for replica in replicas:
        for family in text_string_to_metric_families(replica.metrics()):
            found += [(sample.name, sample.labels, sample.value) for sample in family.samples]
    return found


def value(found, name: str, **labels: str) -> float:
    """The sum over replicas (and over labels not given) of a sample."""
    return sum(v for n, got, v in found if n == name and labels.items() <= got.items())


def test_a_scenario_of_runs_shows_in_counters_histograms_and_gauges(operators, sj, namespace):
    operator = operators.start()
    sj.apply("fine", {"schedule": NEVER, "jobTemplate": busybox("true")})
    sj.apply(
        "flaky",
        {
            "schedule": NEVER,
            "failureSuspendThreshold": 1,
            "retryPolicy": {
                "maxAttempts": 2,
                "retryOn": ["NonZeroExit"],
                "backoff": {"initialSeconds": 1, "jitter": 0},
            },
            "jobTemplate": busybox("exit 1"),
        },
    )
    sj.apply(
        "frozen",
        {
            "schedule": NEVER,
            "heartbeat": {"intervalSeconds": 30, "timeoutSeconds": 60},
            "retryPolicy": {"maxAttempts": 1},
            "jobTemplate": busybox("sleep 120"),
        },
    )
    for name in ("fine", "flaky", "frozen"):
        sj.annotate(name, "pgsched.dev/run-now", "go")
    sj.wait_runs("fine", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60, "success")
    sj.wait_runs(
        "flaky", lambda runs: len(runs) == 2 and runs[1]["status"] == "FAILED", 90, "two failures"
    )
    [running] = sj.wait_runs(
        "frozen", lambda runs: runs and runs[0]["heartbeat_at"], 60, "a first heartbeat"
    )
    # The pod is "lost": its last heartbeat is now older than timeoutSeconds (and the next
    # beat is 30 s away, long after the verdict from the API: the Job is still active),
    # while the run API was served all along (else its silence would count only from the
    # API's start a moment ago: pgsched.silent_since).
    sj.conn.execute(
        "UPDATE pgsched.job_runs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
        [running["id"]],
    )
    sj.conn.execute(
        "UPDATE pgsched.run_api_presence SET available_since = now() - interval '2 hours'"
    )
    sj.wait_runs("frozen", lambda runs: runs[0]["reason"] == "HeartbeatLost", 30, "the reaper")
    # A database error in the tick: its session is killed under it (it fails open).
    wait_for(lambda: terminate_backends(operators.dsn, application_name="pgsched-tick"), 10,
             describe="the tick session")  # fmt: skip

    def scraped():
        found = samples(operator)
        ready = (
            value(found, "pgsched_runs_total", namespace=namespace, status="FAILED", reason="HeartbeatLost")
            and value(found, "pgsched_auto_suspended", namespace=namespace, scheduledjob="flaky")
            and value(found, "pgsched_database_errors_total", component="tick")
        )  # fmt: skip
        # One scrape reads the counters one after the other: the tick's error may have
        # been counted between its ticks_total and its database_errors_total. A scrape
        # that begins after this one saw the error sees both counts.
        return ready and samples(operator)

    found = wait_for(scraped, 30, describe=lambda: f"the metrics; got:\n{operator.metrics()}")

    runs = {
        (labels["status"], labels["reason"]): v
        for name, labels, v in found
        if name == "pgsched_runs_total" and labels["namespace"] == namespace
    }
    assert runs[("COMPLETED", "")] >= 1
    assert runs[("FAILED", "NonZeroExit")] == 2
    assert runs[("FAILED", "HeartbeatLost")] == 1
    assert runs[("RUNNING", "")] >= 4 and runs[("QUEUED", "")] >= 4
    assert value(found, "pgsched_retries_total", reason="NonZeroExit") == 1
    # The reaper only marks the silent run; the API then confirms its Job is still active.
    assert value(found, "pgsched_reaped_runs_total", signature="outcome_pending") == 1
    assert value(found, "pgsched_schedule_to_start_seconds_count", namespace=namespace) >= 4
    assert value(
        found, "pgsched_schedule_to_start_seconds_bucket", namespace=namespace, le="+Inf"
    ) == value(found, "pgsched_schedule_to_start_seconds_count", namespace=namespace)
    assert (
        value(found, "pgsched_run_duration_seconds_count", namespace=namespace, status="COMPLETED")
        >= 1
    )
    assert (
        value(found, "pgsched_run_duration_seconds_count", namespace=namespace, status="FAILED")
        == 3
    )
    phases = {
        labels["phase"]
        for name, labels, v in found
        if name == "pgsched_tick_duration_seconds_count" and v
    }
    assert phases == {"tick", "materialize", "reap", "settle", "dispatch"}
    assert value(found, "pgsched_ticks_total", result="leader") > 0
    assert value(found, "pgsched_ticks_total", result="error") >= 1
    assert value(found, "pgsched_database_errors_total", component="tick") >= 1
    assert (
        value(found, "pgsched_consecutive_failures", namespace=namespace, scheduledjob="flaky") == 1
    )
    assert value(found, "pgsched_kube_requests_total", verb="POST", code="201") >= 4  # Jobs, Events
    assert value(found, "pgsched_kube_requests_total", verb="PATCH", code="200") >= 1  # statuses


def test_queue_depth_counts_due_runs_waiting_at_the_cap(operators, sj, namespace):
    operator = operators.start()
    sj.apply(
        "busy", {"schedule": NEVER, "maxConcurrentRuns": 1, "jobTemplate": busybox("sleep 60")}
    )
    sj.annotate("busy", "pgsched.dev/run-now", "a")
    sj.wait_runs("busy", lambda runs: runs and runs[0]["status"] == "RUNNING", 60, "the first run")
    sj.annotate("busy", "pgsched.dev/run-now", "b")
    depth = wait_for(
        lambda: value(samples(operator), "pgsched_queue_depth", namespace=namespace),
        30,
        describe=lambda: f"pgsched_queue_depth; runs {[r['status'] for r in sj.runs('busy')]}",
    )
    assert depth == 1


def test_every_replica_exports_its_leader_gauge_and_one_leads(operators):
    replicas = [operators.start(), operators.start()]

    def gauges():
        values = [value(samples(replica), "pgsched_tick_leader") for replica in replicas]
        both_ticked = all(value(samples(replica), "pgsched_ticks_total") for replica in replicas)
        return both_ticked and values

    values = wait_for(gauges, 30, describe="both replicas to tick")
    assert len(values) == 2 and set(values) <= {0.0, 1.0}
    assert wait_for(
        lambda: sum(value(samples(replica), "pgsched_tick_leader") for replica in replicas) >= 1,
        10,
        describe="a leading replica",
    )


def test_the_leader_gauge_stays_put_while_leadership_alternates_tick_by_tick(operators):
    """Leadership is taken per tick, so two replicas alternate; "led the latest tick" made
    each replica's gauge flip between scrapes and a "who leads" panel flap (issue 26)."""
    replicas = [operators.start(), operators.start()]

    def led(replica):
        return value(samples(replica), "pgsched_ticks_total", result="leader")

    wait_for(lambda: all(led(replica) for replica in replicas), 60, describe="both to lead")
    before = [led(replica) for replica in replicas]
    seen = []
    for _ in range(30):
        seen.append([value(samples(replica), "pgsched_tick_leader") for replica in replicas])
        time.sleep(0.2)

    assert all(after > first for after, first in zip(map(led, replicas), before, strict=True))
    assert seen == [[1.0, 1.0]] * len(seen), seen


def test_a_rejected_spec_is_logged_once_by_all_replicas_together(operators, sj):
    """Both replicas sync every ScheduledJob, each on several watch events (its own
    finalizer write comes back as one); a refused spec was logged twice per replica (issue
    26). The WARNING is logged where its InvalidSpec Event is created: once."""
    replicas = [operators.start(), operators.start()]
    sj.apply("bad-hour", {"schedule": "0 25 * * *", "jobTemplate": busybox("true")})
    wait_for(
        lambda: (sj.condition("bad-hour") or {}).get("reason") == "InvalidSpec",
        30,
        describe=lambda: f"bad-hour refused: {sj.condition('bad-hour')}",
    )
    wait_for(
        lambda: FINALIZER in sj.get("bad-hour")["metadata"].get("finalizers", []),
        30,
        describe="the finalizer on bad-hour",
    )
    time.sleep(3)  # the echoes of the status and finalizer writes reach both replicas

    logs = "\n".join(replica.log() for replica in replicas)
    warned = re.findall(r" WARNING \S+: \S*bad-hour generation 1 rejected: .*", logs)
    assert len(warned) == 1, warned
    assert "hour" in warned[0]


def test_client_side_throttling_is_counted(operators, sj):
    operator = operators.start(PGSCHED_API_QPS="1", PGSCHED_API_BURST="1")
    sj.apply("slow", {"schedule": NEVER, "jobTemplate": busybox("true")})
    sj.annotate("slow", "pgsched.dev/run-now", "go")
    found = wait_for(
        lambda: (
            value(found := samples(operator), "pgsched_kube_throttled_total", source="client")
            and found
        ),
        60,
        describe="client-side throttling",
    )
    assert value(found, "pgsched_kube_throttle_seconds_total", source="client") > 0


def test_json_logs_carry_the_run_context_on_every_line_about_a_run(operators, sj, namespace):
    operator = operators.start(PGSCHED_LOG_FORMAT="json")
    sj.apply(
        "noisy",
        {
            "schedule": NEVER,
            "retryPolicy": {"maxAttempts": 2, "retryOn": ["NonZeroExit"],
                            "backoff": {"initialSeconds": 0, "jitter": 0}},
            "jobTemplate": busybox("exit 2"),
        },
    )  # fmt: skip
    sj.annotate("noisy", "pgsched.dev/run-now", "go")
    runs = sj.wait_runs(
        "noisy", lambda runs: len(runs) == 2 and runs[1]["settled_at"], 90, "both attempts settled"
    )
    wait_for(
        lambda: f"Job noisy-{runs[1]['id']} ended" in operator.log(), 15, describe="the last line"
    )

    entries = [json.loads(line) for line in operator.log().splitlines() if line.startswith("{")]
    assert entries and all({"timestamp", "level", "logger", "message"} <= e.keys() for e in entries)
    attempts = {run["id"]: run["attempt"] for run in runs}
    about_runs = [
        entry
        for entry in entries
        if any(re.search(rf"\brun {run_id}\b", entry["message"]) for run_id in attempts)
    ]
    assert len(about_runs) >= 6  # queued, Job created and Job ended, twice; retried; not retried
    for entry in about_runs:
        assert entry.get("run_id") in attempts, entry
        assert entry["definition"] == f"{namespace}/noisy", entry
        assert entry["attempt"] == attempts[entry["run_id"]], entry
