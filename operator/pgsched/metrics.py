"""Prometheus metrics of the operator, in one place so names and labels stay consistent.

Every replica exports its own view; sum across replicas in queries. Run outcomes are
counted by the publisher, which sees each status change exactly once across replicas
(outbox rows are claimed with SKIP LOCKED), so ``pgsched_runs_total`` summed over
replicas is exact.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS = Counter(
    "pgsched_runs_total",
    "Run status changes, by the status entered and its reason.",
    ["namespace", "status", "reason"],
)
RUN_STARTS = Counter(
    "pgsched_run_starts_total",
    "Runs whose workload container started (event STARTED), and runs whose pod cannot start"
    " yet (event LAUNCHING, by the pod's reason: ErrImagePull, CreateContainerConfigError,"
    " Unschedulable, AwaitingAdmission, ...).",
    ["namespace", "event", "reason"],
)
LAUNCHES_DEFERRED = Counter(
    "pgsched_launches_deferred_total",
    "Launches deferred because the API server was unreachable or answered 5xx/429: the run"
    " went back to QUEUED, its attempt unspent.",
)
PUBLISH_REFUSED = Counter(
    "pgsched_publish_refused_total",
    "Run changes of a namespace whose Events or status writes the API server refused for a"
    " reason of that namespace's (403, a terminating namespace, 4xx): dropped from the"
    " outbox so every other namespace's go on.",
    ["namespace", "code"],
)
RELAUNCHES = Counter(
    "pgsched_relaunches_total",
    "Runs claimed by a tick that never launched them (its replica stopped in between),"
    " launched again under the same lease.",
)
SCHEDULE_SKEW = Histogram(
    "pgsched_schedule_to_start_seconds",
    "From a run's scheduled time to its claim (start).",
    ["namespace"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900),
)
RUN_DURATION = Histogram(
    "pgsched_run_duration_seconds",
    "From a run's start to its terminal status.",
    ["namespace", "status"],
    buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600),
)
TICK_DURATION = Histogram(
    "pgsched_tick_duration_seconds",
    "Duration of whole ticks and of each phase, on the replica that led them.",
    ["phase"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# One series per replica (Prometheus tells replicas apart by their target labels): the sum
# over replicas is 0 while no replica leads, e.g. the database is down or the lock is stuck.
# Leadership is taken per tick and may alternate between replicas tick by tick, so the gauge
# says whether this replica led any tick within a window (LEADER_WINDOW_SECONDS, or three
# ticks if longer): it does not flap, and several replicas may show 1 at once. Who leads how
# much: rate(pgsched_ticks_total{result="leader"}).
LEADER_WINDOW_SECONDS = 30.0
LEADER = Gauge(
    "pgsched_tick_leader",
    "1 if this replica led a tick within the last 30 s (or three tick intervals), else 0.",
)


def leader_window_seconds(tick_interval_seconds: float) -> float:
    """How recently a replica must have led a tick for ``pgsched_tick_leader`` to be 1."""
    return max(LEADER_WINDOW_SECONDS, 3 * tick_interval_seconds)


# After a failover, dispatch waits for the new WAL timeline's failover pass (at most 300 s):
# 1 on a replica whose last led tick claimed nothing for that reason.
DISPATCH_HELD = Gauge(
    "pgsched_dispatch_held_for_failover_pass",
    "1 if this replica's last led tick claimed nothing because the database's new WAL"
    " timeline (a failover) has not been compared with the Jobs yet, else 0.",
)
RESTORATIONS = Counter(
    "pgsched_failover_lost_runs_total",
    "Runs a failover lost with their rows, found through their Jobs by the failover pass, by"
    " what was done: restored, duplicate_ran (the new primary ran the same work already),"
    " forged (lease not genuine), no_definition, incomplete (a Job of an older release).",
    ["outcome"],
)
TICKS = Counter("pgsched_ticks_total", "Ticks attempted by this replica, by result.", ["result"])
REAPED = Counter(
    "pgsched_reaped_runs_total", "Runs ended by the reaper, by signature.", ["signature"]
)
RETRIES = Counter(
    "pgsched_retries_total", "Retry attempts queued, by the failure reason.", ["reason"]
)
# Gauges read from the database by each replica (k8s/serve/gauges.py, every PGSCHED_GAUGE_INTERVAL_SECONDS): every
# replica reports the same global value, so aggregate them with max(), not sum().
QUEUE_DEPTH = Gauge(
    "pgsched_queue_depth", "QUEUED runs that are due now, by namespace.", ["namespace"]
)
FAILURE_STREAK = Gauge(
    "pgsched_consecutive_failures",
    "Consecutive final failures of a ScheduledJob (only jobs whose streak is not zero).",
    ["namespace", "scheduledjob"],
)
AUTO_SUSPENDED = Gauge(
    "pgsched_auto_suspended",
    "1 for a ScheduledJob suspended after failureSuspendThreshold consecutive failures.",
    ["namespace", "scheduledjob"],
)
# Per ConcurrencyPool (a pool that jobs name but that does not exist has no limit series).
POOL_LIMIT = Gauge("pgsched_pool_limit", "A ConcurrencyPool's limit.", ["namespace", "pool"])
POOL_RUNNING = Gauge(
    "pgsched_pool_running", "RUNNING runs of a ConcurrencyPool's jobs.", ["namespace", "pool"]
)
POOL_QUEUED = Gauge(
    "pgsched_pool_queued", "Due QUEUED runs of a ConcurrencyPool's jobs.", ["namespace", "pool"]
)
WORK_QUEUE = Gauge(
    "pgsched_work_queue_keys",
    "Objects waiting or being handled in the operator's work queues: `scheduledjobs` (to"
    " sync into the database), `scheduledjob-writes` (finalizers, statuses and Events to"
    " write), `jobs` (finished Jobs to record), `concurrencypools`.",
    ["queue"],
)
KUBE_REQUESTS = Counter(
    "pgsched_kube_requests_total",
    "Kubernetes API requests by verb and response code.",
    ["verb", "code"],
)
KUBE_THROTTLED = Counter(
    "pgsched_kube_throttled_total",
    "Kubernetes API throttling: 'client' waits of our own rate limiter, 'server' 429 answers.",
    ["source"],
)
KUBE_THROTTLE_SECONDS = Counter(
    "pgsched_kube_throttle_seconds_total",
    "Seconds spent waiting because of throttling.",
    ["source"],
)
DB_ERRORS = Counter("pgsched_database_errors_total", "Database errors by component.", ["component"])
UI_REQUEST_SECONDS = Histogram(
    "pgsched_ui_request_seconds",
    "Web UI requests, from arrival to the last byte of the answer, by page and status code.",
    ["page", "code"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5, 10),
)
# Notifications (k8s/notifications/notifier.py) and finish-by deadlines (engine/deadlines.py).
DEADLINES_MISSED = Counter(
    "pgsched_deadlines_missed_total",
    "Runs not finished by their spec.deadline (they keep running), counted by the publisher.",
    ["namespace"],
)
NOTIFICATIONS = Counter(
    "pgsched_notifications_total",
    "Notification delivery attempts by this replica, by target type and outcome (delivered,"
    " failed: retried later, dead: a dead letter, deferred: the receiver's rate bound).",
    ["namespace", "type", "outcome"],
)
NOTIFICATIONS_DEAD = Gauge(
    "pgsched_notifications_dead",
    "Dead-lettered notifications kept in the outbox, by namespace (every replica reports the"
    " same value: aggregate with max()).",
    ["namespace"],
)
# The run API job pods talk to (runapi/server.py).
RUN_API_REQUESTS = Histogram(
    "pgsched_run_api_request_seconds",
    "Run API requests answered by this replica, from arrival to the answer, by request and"
    " status code (a cancel long poll counts its wait).",
    ["request", "code"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RUN_API_REFUSED = Counter(
    "pgsched_run_api_refused_total",
    "Run API requests refused 429 for a namespace's budget (namespace empty: leases that"
    " failed their check), by why: rate, concurrency, waiters.",
    ["namespace", "why"],
)
