"""``pgsched operator``: watches for the resources, two threads for the engine.

On start-up the operator checks the database (``db.preflight``) and refuses to start, with
an explanation, if it cannot schedule safely. Then every replica runs the controllers (a
list-then-watch per namespace feeding a bounded work queue) for ScheduledJobs, our Jobs,
ConcurrencyPools, Calendars and NotificationPolicies; the tick thread (the engine loop, one
leader per tick); the publisher thread (the operator's services); ``/healthz`` and
metrics; and, with ``PGSCHED_WEBHOOK_BIND``, the admission webhook.

pgsched watches for itself rather than through an operator framework to keep memory
bounded by the work, not the fleet. In namespaced mode nothing cluster-scoped is listed or
watched. SIGTERM or SIGINT stops the watches, lets the workers finish, then stops both
threads.

What runs where, and why not a framework: docs/architecture.md, "The operator process".
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import prometheus_client
import psycopg

from pgsched import metrics
from pgsched.db import boundary, connection, preflight, primaries, replication
from pgsched.db.session import Session
from pgsched.engine import deadlines, history, loop
from pgsched.engine.tick import Ticker, TickResult
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.client.controller import Workers, by_uid
from pgsched.k8s.client.latest import LatestObjects
from pgsched.k8s.client.watch import Event
from pgsched.k8s.client.workqueue import WorkQueue
from pgsched.k8s.failover import revalidation
from pgsched.k8s.jobside import jobevents, resync, starts, verdicts
from pgsched.k8s.jobside.launcher import KubernetesLauncher
from pgsched.k8s.kinds import calendars, concurrencypools, notificationpolicies, pool_status
from pgsched.k8s.notifications import destinations, notifier
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.runs_api import changes
from pgsched.k8s.scheduledjobs import scheduledjob_writer, scheduledjobs
from pgsched.k8s.serve import following, gauges, health, servers
from pgsched.k8s.serve.servers import StartupError as StartupError  # the CLI's to catch
from pgsched.k8s.serve.settings import OperatorSettings

log = logging.getLogger(__name__)

# ScheduledJob bodies waiting to be synced: one list chunk, so a fleet's list is paced by
# the database (the sync), never held whole.
SYNC_CAPACITY = 500
SYNC_WORKERS = 2
# Write records waiting for the API budget: 100,000 new ScheduledJobs fit (a few hundred
# bytes each); past that, syncing waits for writes. Writers mostly wait for the API server
# (a request takes 10-50 ms on a busy one): enough of them that the budget, not their
# number, sets the pace (16 x 3 writes per 30-60 ms ~ 1,000 requests a second).
WRITES_CAPACITY = 250_000
WRITE_WORKERS = 16
JOB_CAPACITY = 1_000
JOB_WORKERS = 4
SHUTDOWN_SECONDS = 30.0


class EngineThreads:
    """The tick and publisher threads, with what the liveness probe needs to know."""

    def __init__(
        self,
        settings: OperatorSettings,
        kube: api.KubeApi,
        publisher: Publisher,
        *,
        clock: Callable[[], datetime | None],
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.stop = threading.Event()
        self.last_tick = time.monotonic()
        self.last_led: float | None = None
        self.leader_window = metrics.leader_window_seconds(settings.tick.interval_seconds)
        connect = self._connector("pgsched-tick")
        launcher = KubernetesLauncher(kube, settings.jobs, connect=self._connector("pgsched-adopt"))
        # Dispatch waits for a new timeline's failover pass (k8s/failover/revalidation.py).
        tick = dataclasses.replace(
            settings.tick, failover_pass_wait_seconds=revalidation.DISPATCH_WAIT_SECONDS
        )
        self.ticker = Ticker(connect, launcher, tick, clock=clock)
        self.tick_thread = threading.Thread(
            target=self.ticker.run_forever,
            args=(self.stop,),
            kwargs={"on_tick": self._observe},
            name="pgsched-tick",
            daemon=True,
        )
        self.publish_thread = threading.Thread(
            target=self._publish,
            args=(publisher,),
            name="pgsched-publisher",
            daemon=True,
        )

    def _publish(self, publisher: Publisher) -> None:
        """The publisher thread: the operator's services on one session, each on its
        interval (``engine.loop``: interruptible, fail-open)."""
        session = Session(self._connector("pgsched-publisher"))
        kube = publisher.kube  # the background share of the API tokens
        settings = self.settings
        pools_seen = pool_status.PoolStatus(kube)
        judge = verdicts.Verdicts(kube)
        recovery = starts.Recovery()
        revalidation_hold = revalidation.Hold()
        notify = notifier.Notifier(
            notifier.KubeSecrets(kube),
            workers=settings.notify.workers,
            per_namespace_concurrency=settings.notify.namespace_concurrency,
            per_address_concurrency=settings.notify.address_concurrency,
            deadline=settings.notify.deadline_seconds,
            allowed=destinations.Allowed.parse(settings.notify_allow),
        )
        services = [
            loop.Service(
                "publishing run events",
                lambda: publisher.run_once(session.connection()),
                settings.publish_interval_seconds,
                again=lambda published: bool(published.events or published.statuses),
            ),
            loop.Service(
                "gauges",
                lambda: gauges.run_once(session.connection(), now=self.clock()),
                settings.gauge_interval_seconds,
            ),
            loop.Service(
                "pool status",
                lambda: pools_seen.run_once(session.connection()),
                settings.gauge_interval_seconds,
            ),
            loop.Service(
                "starts",
                lambda: starts.run_once(
                    session.connection(), kube, now=self.clock(), recovery=recovery
                ),
                settings.verdict_interval_seconds,
            ),
            loop.Service(
                "verdicts",
                lambda: judge.run_once(session.connection(), now=self.clock()),
                settings.verdict_interval_seconds,
            ),
            # After a failover: every run from before it compared with its Job, once.
            loop.Service(
                "failover revalidation",
                lambda: revalidation.run_once(
                    session.connection(), kube, hold=revalidation_hold, now=self.clock()
                ),
                settings.verdict_interval_seconds,
                again=lambda result: result.more,
            ),
            loop.Service(
                "finish-by deadlines",
                lambda: deadlines.run_once(session.connection(), now=self.clock()),
                deadlines.INTERVAL_SECONDS,
            ),
            # Never waits for a receiver: deliveries run on the notifier's own workers.
            loop.Service(
                "notifications",
                lambda: notify.run_once(session.connection(), now=self.clock()),
                settings.publish_interval_seconds,
            ),
            loop.Service(
                "history partitions",
                lambda: history.run_once(
                    session.connection(), retention=settings.history_retention, now=self.clock()
                ),
                history.INTERVAL_SECONDS,
            ),
            # Run changes are kept for watches of the Run API, served or not: forget old ones.
            loop.Service(
                "pruning run changes",
                lambda: changes.prune(session.connection(), now=self.clock()),
                changes.PRUNE_SECONDS,
            ),
            loop.Service(
                "resync",
                lambda: resync.run_once(session.connection(), kube, now=self.clock()),
                settings.resync_interval_seconds,
            ),
        ]

        def on_error(service: loop.Service, error: Exception) -> None:
            if isinstance(error, psycopg.Error):
                metrics.DB_ERRORS.labels("publisher").inc()
                session.close()  # reconnect on the next round

        try:
            loop.run(services, self.stop, on_error=on_error)
        finally:
            try:  # record what receivers took, so a restart does not send it again
                notify.close(session.connection())
            except psycopg.Error:
                notify.close()  # unrecorded: delivered again once their leases run out
            session.close()

    def _connector(self, application_name: str) -> Any:
        # A frozen server costs the tick and the publisher this bound, not the freeze; a
        # former primary of a multi-host DSN is passed over on connect (db.primaries).
        bound = self.settings.tick.stall_seconds
        return lambda: primaries.connect(
            self.settings.dsn, application_name=application_name, answer_timeout=bound
        )

    def start(self) -> None:
        self.tick_thread.start()
        self.publish_thread.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        self.stop.set()
        for thread in (self.tick_thread, self.publish_thread):
            thread.join(timeout=timeout)

    def _observe(self, result: TickResult) -> None:
        self.last_tick = time.monotonic()
        if result.leader:
            self.last_led = self.last_tick
        # Leadership is taken per tick and moves freely between replicas: "led the latest
        # tick" would flap with every tick. "Led one within the window" stays put.
        led = self.last_led is not None and self.last_tick - self.last_led <= self.leader_window
        metrics.LEADER.set(1 if led else 0)
        metrics.TICKS.labels(
            "error" if result.error else "leader" if result.leader else "follower"
        ).inc()
        if result.database_error:
            metrics.DB_ERRORS.labels("tick").inc()
        if result.leader:
            metrics.DISPATCH_HELD.set(1 if result.dispatch_held else 0)
            for phase, seconds in result.durations.items():
                metrics.TICK_DURATION.labels(phase).observe(seconds)
        if result.dispatched and result.dispatched.deferred:
            metrics.LAUNCHES_DEFERRED.inc(len(result.dispatched.deferred))
        if result.dispatched and result.dispatched.relaunched:
            metrics.RELAUNCHES.inc(len(result.dispatched.relaunched))
        if result.reaped:
            for signature, ids in result.reaped.run_ids.items():
                if ids:
                    metrics.REAPED.labels(signature).inc(len(ids))

    def health(self) -> dict[str, Any]:
        stalled_after = max(60.0, 20 * self.settings.tick.interval_seconds)
        since = time.monotonic() - self.last_tick
        problems = []
        if not self.tick_thread.is_alive():
            problems.append("the tick thread died")
        if not self.publish_thread.is_alive():
            problems.append("the publisher thread died")
        if since > stalled_after:
            problems.append(f"no tick finished for {since:.0f}s")
        if problems:
            raise health.Unhealthy("; ".join(problems))
        return {"seconds_since_tick": round(since, 3)}


def check_database(settings: OperatorSettings) -> None:
    def connect() -> connection.Connection:
        return connection.connect(settings.dsn, application_name="pgsched-preflight")

    try:
        with connect() as conn:
            failed = [check for check in preflight.run(conn, connect=connect) if not check.ok]
            if not failed:
                found = replication.inspect(conn)
                log.log(
                    logging.INFO if found.mode in ("synchronous", "single") else logging.WARNING,
                    "database replication: %s",
                    found.detail,
                )
                blind = replication.blind_to_standbys(conn)
                if blind is not None:
                    log.warning("database replication: %s", blind)
                for problem in boundary.problems(conn):
                    log.warning("tenant boundary: %s", problem)
    except (psycopg.OperationalError, preflight.PreflightError) as error:
        raise StartupError(f"database: {str(error).strip()}") from None
    if failed:
        raise StartupError("; ".join(f"{check.name}: {check.detail}" for check in failed))


def require_served(
    kube: api.KubeApi, *, group: str, version: str, plural: str, timeout: float = 60.0
) -> None:
    """Wait until the API server serves ``plural`` (a watch of a resource not served would
    only fail and retry)."""
    path = f"/apis/{group}/{version}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            served = {item.get("name") for item in kube.get(path).get("resources") or []}
        except api.ApiError as error:
            if not error.not_found:
                raise StartupError(f"cannot read API discovery {path}: {error}") from None
            served = set()
        if plural in served:
            return
        if time.monotonic() >= deadline:
            raise StartupError(
                f"the API server does not serve {plural}.{group}/{version} (waited {timeout:g}s):"
                f" install the CRD (kubectl apply -f crds/{plural}.{group}.yaml, or the Helm"
                " chart with crds.install=true)"
            )
        time.sleep(1.0)


def run(settings: OperatorSettings, *, clock: Callable[[], datetime | None] = lambda: None) -> None:
    """Run the operator until SIGTERM/SIGINT (blocks; call from the main thread).

    ``clock`` is the engine's "now" (the tick's and the handlers'): None, the default,
    means the database clock, as in production; a test may pass a pinned or shifted one.
    """
    check_database(settings)
    # The two plain listeners bind before any thread starts: a port already taken stops the
    # start with the setting's name, not with a traceback behind running threads.
    host, _, port = settings.metrics_bind.rpartition(":")
    try:
        prometheus_client.start_http_server(int(port), addr=host)
    except OSError as error:
        raise StartupError(f"PGSCHED_METRICS_BIND={settings.metrics_bind}: {error}") from None
    checks: list[Callable[[], dict[str, Any]]] = []  # the operator's, once it has started
    try:
        server = health.serve(settings.health_bind, lambda: _healthz(checks))
    except OSError as error:
        raise StartupError(f"PGSCHED_HEALTH_BIND={settings.health_bind}: {error}") from None
    kube = api.KubeApi.from_environment(qps=settings.api_qps, burst=settings.api_burst)
    for plural in (
        names.PLURAL,
        names.POOL_PLURAL,
        names.CALENDAR_PLURAL,
        names.NOTIFICATION_POLICY_PLURAL,
    ):
        require_served(kube, group=names.GROUP, version=names.VERSION, plural=plural)
    # Events, statuses and cleanup take only API tokens that launching Jobs does not need.
    # ScheduledJobs as their watch last delivered them: a status write needs no GET first.
    latest = LatestObjects(api.scheduled_job_path)
    publisher = Publisher(kube.background(), clock=clock, latest=latest)
    pool = connection.pool(settings.dsn, name="pgsched-handlers", max_size=settings.pool_size)
    threads = EngineThreads(settings, kube, publisher, clock=clock)
    context = scheduledjobs.Context(
        pool=pool,
        kube=kube.background(),
        publisher=publisher,
        clock=clock,
        job_policy=settings.jobs.policy,
    )
    writes = Workers(
        "scheduledjob-writes",
        WorkQueue[UUID, scheduledjobs.Writes](
            capacity=WRITES_CAPACITY, merge=scheduledjobs.Writes.merge
        ),
        lambda _uid, record: scheduledjob_writer.write(context, record),
        count=WRITE_WORKERS,
    )
    pools = concurrencypools.Pools(pool, kube.background(), publisher, clock=clock)
    calendar_handler = calendars.Calendars(pool, kube.background(), publisher, clock=clock)
    policies = notificationpolicies.NotificationPolicies(
        pool, kube.background(), publisher, clock=clock
    )
    admission = servers.webhook(settings)
    run_api = servers.run_api(settings, clock)
    runs_api = servers.runs_api(settings, kube)
    where = following.Where.of(kube, settings)
    controllers = [
        where.controller(
            kube,
            names.PLURAL,
            group=names.GROUP,
            version=names.VERSION,
            plural=names.PLURAL,
            select=latest.observing(by_uid),
            handle=lambda _uid, event: _sync(context, writes.queue, event),
            workers=SYNC_WORKERS,
            capacity=SYNC_CAPACITY,
            merge=_newest_listed,
            held=True,
        ),
        where.controller(
            kube,
            "jobs",
            group="batch",
            plural="jobs",
            label_selector=names.LABEL_RUN_ID,
            select=jobevents.select,
            handle=lambda _uid, event: jobevents.record(pool, kube, event),
            workers=JOB_WORKERS,
            capacity=JOB_CAPACITY,
        ),
        *(
            # Few objects that change rarely: one worker serves each kind.
            where.controller(
                kube,
                plural,
                group=names.GROUP,
                version=names.VERSION,
                plural=plural,
                select=by_uid,
                handle=handle,
                workers=1,
                capacity=SYNC_CAPACITY,
                held=True,
            )
            for plural, handle in (
                (names.POOL_PLURAL, pools.handle),
                (names.CALENDAR_PLURAL, calendar_handler.handle),
                (names.NOTIFICATION_POLICY_PLURAL, policies.handle),
            )
        ),
    ]

    def check() -> dict[str, Any]:
        found = threads.health()
        dead = [item.name for item in controllers if not item.alive()]
        if not writes.alive():
            dead.append(writes.name)
        if admission is not None and not admission.alive():
            dead.append("pgsched-webhook")
        if not run_api.alive():
            dead.append("pgsched-run-api")
        if runs_api is not None and not runs_api.alive():
            dead.append("pgsched-runs-api")
        if where.served is not None and not where.served.alive():
            dead.append("pgsched-watch-namespaces")
        if dead:
            raise health.Unhealthy(f"threads died: {', '.join(dead)}")
        found["listed"] = all(item.listed() for item in controllers)
        if where.served is not None:
            found["namespaces"] = where.served.names()
        return found

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info(
        "pgsched operator starting: namespaces=%s, tick every %ss, API %s qps (burst %s)",
        where.describe(),
        settings.tick.interval_seconds,
        settings.api_qps,
        settings.api_burst,
    )
    if where.served is not None and not where.served.start(stop):
        server.shutdown()  # stopped while the first list of namespaces was awaited
        pool.close()
        return
    # The run API first: pods of runs launched before a restart beat again at once.
    servers.listen(
        [
            ("PGSCHED_RUN_API_BIND", settings.run_api.bind, run_api),
            ("PGSCHED_RUNS_API_BIND", settings.runs_api.bind, runs_api),
        ],
        stop_seconds=SHUTDOWN_SECONDS,
    )
    threads.start()
    writes.start()
    if admission is not None:
        admission.start()
    for controller in controllers:
        controller.start()
    checks.append(check)
    try:
        stop.wait()
        log.info("pgsched operator stopping")
    finally:
        server.shutdown()
        if admission is not None:
            admission.stop(SHUTDOWN_SECONDS)
        if where.served is not None:
            where.served.stop(SHUTDOWN_SECONDS)
        for controller in controllers:
            controller.stop(SHUTDOWN_SECONDS)
        writes.stop(SHUTDOWN_SECONDS)
        threads.shutdown()
        run_api.stop(SHUTDOWN_SECONDS)
        if runs_api is not None:
            runs_api.stop(SHUTDOWN_SECONDS)
        pool.close()


def _healthz(checks: list[Callable[[], dict[str, Any]]]) -> dict[str, Any]:
    if not checks:
        raise health.Unhealthy("starting")
    return checks[0]()


def _sync(
    context: scheduledjobs.Context,
    writes: WorkQueue[UUID, scheduledjobs.Writes],
    event: Event,
) -> float | None:
    if event.type == "DELETED":
        synced = scheduledjobs.gone(context, event.object)
    else:
        synced = scheduledjobs.sync(context, event.object, revalidate=event.listed)
    if synced.writes is not None:
        writes.put(synced.writes.uid, synced.writes)
    return synced.retry_in


def _newest_listed(older: Event, newer: Event) -> Event:
    """The newest state of a ScheduledJob, validated afresh if either was listed."""
    return Event(newer.type, newer.object, listed=older.listed or newer.listed)
