"""``pgsched operator``: kopf for the resources, two threads for the engine.

On start-up the operator checks the database (version, schema, that session advisory
locks work — see ``db.preflight``) and refuses to start with an explanation if it cannot
schedule safely. Then, on every replica:

- kopf watches ScheduledJobs and our Jobs (``handlers``), in standalone mode: no peering,
  every replica handles every event, handlers are idempotent;
- the tick thread runs the engine loop; one replica leads each tick (advisory lock);
- the publisher thread runs the operator's services (``engine.loop``): the run-events
  outbox into Events and statuses, the gauges, ConcurrencyPool statuses, the verdicts of silent runs, the resync;
- ``/healthz`` (kopf's liveness endpoint) fails when a thread is dead or the tick loop
  stopped making progress; Prometheus metrics are served on their own port.

Least privilege: kopf's scanning (a cluster-wide list/watch of namespaces and CRDs, to
follow namespace patterns and CRDs appearing later) is turned off. The namespaces are exact
names, and the ScheduledJob CRD must be served before kopf starts (``require_served``), so
a namespaced installation needs no cluster-scoped permission at all. Without this, kopf
retries the forbidden lists for a minute or more before it serves anything.

SIGTERM stops kopf, then both threads (the tick thread finishes its tick and releases the
leader lock explicitly; its session closing would release it anyway).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import kopf
import prometheus_client
import psycopg

from pgsched import metrics
from pgsched.db import connection, preflight, primaries, replication
from pgsched.db.session import Session
from pgsched.engine import history, loop
from pgsched.engine.tick import Ticker, TickResult
from pgsched.k8s import api, gauges, handlers, names, pool_status, resync, verdicts
from pgsched.k8s.launcher import KubernetesLauncher
from pgsched.k8s.publisher import Publisher
from pgsched.k8s.settings import OperatorSettings

log = logging.getLogger(__name__)


# kopf's per-object workers (see _startup): enough to keep the handler threads busy.
WORKER_LIMIT = 50
WORKER_IDLE_SECONDS = 0.5


class StartupError(RuntimeError):
    pass


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
        connect = self._connector("pgsched-tick")
        self.ticker = Ticker(
            connect, KubernetesLauncher(kube, settings.jobs), settings.tick, clock=clock
        )
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
                "verdicts",
                lambda: judge.run_once(session.connection(), now=self.clock()),
                settings.verdict_interval_seconds,
            ),
            loop.Service(
                "history partitions",
                lambda: history.run_once(
                    session.connection(), retention=settings.history_retention, now=self.clock()
                ),
                history.INTERVAL_SECONDS,
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
        metrics.LEADER.set(1 if result.leader else 0)
        metrics.TICKS.labels(
            "error" if result.error else "leader" if result.leader else "follower"
        ).inc()
        if result.database_error:
            metrics.DB_ERRORS.labels("tick").inc()
        if result.leader:
            for phase, seconds in result.durations.items():
                metrics.TICK_DURATION.labels(phase).observe(seconds)
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
            raise kopf.PermanentError("; ".join(problems))
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
    except (psycopg.OperationalError, preflight.PreflightError) as error:
        raise StartupError(f"database: {str(error).strip()}") from None
    if failed:
        raise StartupError("; ".join(f"{check.name}: {check.detail}" for check in failed))


def require_served(
    kube: api.KubeApi, *, group: str, version: str, plural: str, timeout: float = 60.0
) -> None:
    """Wait until the API server serves ``plural`` (kopf only serves what exists at start)."""
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
    if not log.isEnabledFor(logging.DEBUG):
        # kopf logs every handled event at INFO; pgsched logs what matters about runs itself.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)
    host, _, port = settings.metrics_bind.rpartition(":")
    prometheus_client.start_http_server(int(port), addr=host)
    kube = api.KubeApi.from_environment(qps=settings.api_qps, burst=settings.api_burst)
    for plural in (names.PLURAL, names.POOL_PLURAL):
        require_served(kube, group=names.GROUP, version=names.VERSION, plural=plural)
    # Events, statuses and cleanup take only API tokens that launching Jobs does not need.
    publisher = Publisher(kube.background(), clock=clock)
    pool = connection.pool(settings.dsn, name="pgsched-handlers", max_size=settings.pool_size)
    threads = EngineThreads(settings, kube, publisher, clock=clock)

    @kopf.on.startup()
    def _startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        settings.persistence.finalizer = "pgsched.dev/finalizer"
        settings.scanning.disabled = True  # see the module docstring: least privilege
        # kopf leaves out of its diffs every annotation under its storage prefix, so that
        # prefix must not be pgsched.dev/, home of the run-now and cancel annotations.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="kopf.pgsched.dev"
        )
        # kopf's record of the last handled spec lives in the status
        # (status.kopf.last-handled-configuration), not in an annotation: the reconcile
        # handler hands its status to kopf, so both are one status patch — a new
        # ScheduledJob costs three writes (finalizer, status, Scheduled Event), not four.
        settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()
        settings.posting.level = logging.WARNING
        settings.execution.max_workers = max(4, threads.settings.pool_size * 2)
        settings.watching.server_timeout = 120
        # kopf starts a worker per object with events and, unbounded, handles a whole fleet
        # at once on start-up: one TLS connection per concurrent patch (its connection pool
        # has no limit) until the API server resets them, every patch retried with backoff.
        # A bounded set of workers keeps connections and memory flat; a worker that idles
        # leaves its place at once (kopf's default lingers 5 s per object).
        settings.queueing.worker_limit = WORKER_LIMIT
        settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
        # Its first list stays one response (kopf's default): chunked, it is paced by the
        # bounded workers, and a chunk that takes longer than etcd's compaction interval to
        # work through expires the list's continue token (410 Gone), which kills kopf's
        # watcher for good — seen on a slow machine at 500 per chunk.
        memo["pgsched"] = handlers.Context(
            pool=pool, kube=kube, publisher=publisher, clock=threads.clock
        )
        threads.start()

    @kopf.on.probe(id="engine")
    def _probe(**_: Any) -> dict[str, Any]:
        return threads.health()

    @kopf.on.cleanup()
    def _cleanup(**_: Any) -> None:
        threads.shutdown()

    log.info(
        "pgsched operator starting: namespaces=%s, tick every %ss, API %s qps (burst %s)",
        "all" if settings.all_namespaces else ",".join(settings.namespaces),
        settings.tick.interval_seconds,
        settings.api_qps,
        settings.api_burst,
    )
    try:
        asyncio.run(
            kopf.operator(
                standalone=True,
                clusterwide=settings.all_namespaces,
                namespaces=list(settings.namespaces),
                liveness_endpoint=f"http://{_url_host(settings.health_bind)}/healthz",
                memo=kopf.Memo(),
            )
        )
    finally:
        threads.shutdown()
        pool.close()


def _url_host(bind: str) -> str:
    """``host:port`` for a URL: an IPv6 host needs brackets (``[fd00::1]:8080``)."""
    host, _, port = bind.rpartition(":")
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else bind
