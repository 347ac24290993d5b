"""The cluster variant: three real operator replicas on the local control plane.

``pgsched operator`` processes (the watches, the tick thread, the publisher) over a few dozen
ScheduledJobs whose Jobs run busybox ``sleep`` for 1-10 s next to the heartbeat sidecar,
as pods on the local node (real containers); run-now requests arrive as annotations. On top of the shared
faults (leader kill and pause, session kills, Postgres restart and crash, kill -9 and
SIGSTOP of pod processes) the API server is restarted (seconds down) and stopped for long
outages while Jobs run (``config.api_outage_seconds``: CI a quarter minute, the long run
1-5 minutes), so Jobs finish while nobody can see them: their runs must await the Job's
verdict and end with the Job's outcome, never be retried (I8).

Every operator replica is also killed at once and kept down longer than the jobs'
heartbeat timeout (``replicas_down``, ``config.replicas_down_seconds``), then restarted by
the supervisor; or frozen at once as long (``replicas_pause``: SIGSTOP, then SIGCONT, no
restart). Pods beat through the replicas' run API, so none of them can beat meanwhile,
and that absence must never be called their silence (``pgsched.silent_since``). So that
some pod beats through each absence, a few ScheduledJobs run long (``long_jobs``: 50 s,
staggered), and either fault waits (is owed) until one of them started recently enough
to outlast it.

What the cluster adds to the checks: a watch records every Job ever created (a relist
after an API restart catches up), so I1 also means "one Job per run, carrying the lease of
its one claim"; after the drain no Job of an ended run may still be active and no
process of it still alive (I3: nothing is left running); and no run ended HeartbeatLost or
Orphaned unless the chaos killed or paused its job's processes (``REAPED_ONLY_IF_HURT``).
"""

from __future__ import annotations

import logging
import random
import subprocess
import threading
import time
from datetime import UTC, datetime
from typing import Any

import invariants
from chaos import faults, jobside, workload
from chaos.config import ChaosConfig
from chaos.driver import ChaosDriver, Fault
from chaos.faults import HarnessError
from chaos.replicated import ReplicatedPostgres
from devenv import run_api
from devenv.adminclient import AdminClient, ApiError, Obj
from devenv.controlplane import ControlPlane
from devenv.operators import OperatorProcess
from devenv.postgres import PostgresServer
from pgsched.db import connection
from pgsched.db.connection import Connection
from pgsched.k8s import names
from pgsched.k8s.jobside import verdicts
from pgsched.k8s.jobside.outcomes import POD_END_MARGIN
from plugins.operator import Operators, busybox

log = logging.getLogger(__name__)

# Planted bugs (self-tests only), ``config.planted``:
# - ``no-adoption``: no lease is genuine (``pgsched.lease_is_genuine`` answers false), so
#   nothing a failover lost is taken back from Kubernetes: no claim re-established, no Job
#   adopted, no lost run restored. With failovers the job side's record must show it.
# - ``presence-blind-reaper``: the reaper counts a run's silence from its last beat whether
#   or not a replica served the run API meanwhile (``pgsched.silent_since`` answers
#   ``beat``, as before migration 0039): with every replica down past the heartbeat
#   timeout, runs whose pods were never touched are judged silent; the check
#   ``REAPED_ONLY_IF_HURT`` must say so.
PLANTED = ("no-adoption", "presence-blind-reaper")
_NO_LEASE_IS_GENUINE = (
    "CREATE OR REPLACE FUNCTION pgsched.lease_is_genuine(run_id bigint, lease uuid)"
    " RETURNS boolean LANGUAGE sql STABLE AS 'SELECT false'"
)
_PRESENCE_BLIND_SILENCE = (
    "CREATE OR REPLACE FUNCTION pgsched.silent_since(beat timestamptz, now timestamptz,"
    " gap interval) RETURNS timestamptz LANGUAGE sql STABLE AS 'SELECT beat'"
)
# The cluster variant's own check: its name in the report.
REAPED_ONLY_IF_HURT = "reaped only if its job was hurt"
HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 10, "orphanTimeoutSeconds": 45}
# The long ScheduledJobs' workload, and how long after its run's claim a replicas_down or
# replicas_pause may still start for the workload to outlast it (the absence, the
# replicas' start and the run API's return in between).
LONG_JOB_SECONDS = 50
OUTLAST_MARGIN_SECONDS = 10.0
VERDICT_INTERVAL_SECONDS = 2.0
OPERATOR_ENV = {
    "PGSCHED_RESYNC_INTERVAL_SECONDS": "5",
    "PGSCHED_VERDICT_INTERVAL_SECONDS": f"{VERDICT_INTERVAL_SECONDS:g}",
}


def scheduled_job_spec(
    rng: random.Random, index: int, *, start_timeout_seconds: int | None
) -> dict[str, Any]:
    """``start_timeout_seconds`` None: the product's default."""
    spec: dict[str, Any] = (
        {"schedule": "* * * * *"}
        if index % 4 == 0
        else {"rrule": f"FREQ=MINUTELY;INTERVAL=2;BYSECOND={rng.randrange(60)}"}
    )
    spec |= {
        "maxConcurrentRuns": rng.randint(1, 3),
        "concurrencyPolicy": rng.choices(["Queue", "Skip", "Replace"], weights=[8, 1, 1])[0],
        "cancelGraceSeconds": 10,
        "heartbeat": HEARTBEAT,
        "retryPolicy": workload.RETRY_POLICY,
        "jobTemplate": busybox("sleep $(( PGSCHED_RUN_ID % 10 + 1 ))"),
    }
    if start_timeout_seconds is not None:
        spec["startTimeoutSeconds"] = start_timeout_seconds
    return spec


def long_job_spec(index: int, *, start_timeout_seconds: int | None) -> dict[str, Any]:
    """One of the long ScheduledJobs: a 50 s workload every minute, the ``index``-th
    starting 20 s after the one before (with three, one has always started within the
    last 20 s), never two at once (``Skip``)."""
    spec: dict[str, Any] = {
        "rrule": f"FREQ=MINUTELY;BYSECOND={index * 20 % 60}",
        "maxConcurrentRuns": 1,
        "concurrencyPolicy": "Skip",
        "cancelGraceSeconds": 10,
        "heartbeat": HEARTBEAT,
        "retryPolicy": workload.RETRY_POLICY,
        "jobTemplate": busybox(f"sleep {LONG_JOB_SECONDS}"),
    }
    if start_timeout_seconds is not None:
        spec["startTimeoutSeconds"] = start_timeout_seconds
    return spec


class Annotations(threading.Thread):
    """Run-now requests as annotations (half to a few hot ScheduledJobs), each token
    retried until the API server accepted it. A ScheduledJob whose last request is still
    there (not yet carried out) gets none: overwriting it would drop that request, so
    every request accepted here is one the operator owes a run."""

    def __init__(
        self, api: AdminClient, paths: list[str], rng: random.Random, *, per_second: float
    ) -> None:
        super().__init__(name="chaos-annotations", daemon=True)
        self._api = api
        self._paths = paths
        self._hot = rng.sample(paths, k=min(4, len(paths)))
        self._rng = rng
        self._per_second = per_second
        self._stop_event = threading.Event()
        self.requested = 0
        self.accepted: list[tuple[str, str]] = []  # (path, token)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)

    def run(self) -> None:
        pending: tuple[str, str] | None = None
        while not self._stop_event.wait(self._rng.expovariate(self._per_second)):
            if pending is None:
                targets = self._hot if self._rng.random() < 0.5 else self._paths
                pending = (self._rng.choice(targets), f"chaos-{self.requested + 1}")
            path, token = pending
            try:
                if names.ANNOTATION_RUN_NOW in _annotations(self._api.get(path)):
                    pending = None  # its last request is still being carried out
                    continue
                body = {"metadata": {"annotations": {names.ANNOTATION_RUN_NOW: token}}}
                self._api.patch(path, body)
            except (ApiError, OSError) as error:
                log.debug("run-now annotation not accepted (API server away?): %s", error)
                continue
            self.requested += 1
            self.accepted.append((path, token))
            pending = None

    def acknowledged(self) -> list[tuple[str, str]]:
        """(ScheduledJob name, token) of every request the operator carried out: its
        annotation removed (what ``pgsched run-now`` waits for)."""
        waiting = {
            (path, _annotations(self._api.get(path)).get(names.ANNOTATION_RUN_NOW))
            for path in {path for path, _ in self.accepted}
        }
        return [
            (path.rsplit("/", 1)[1], token)
            for path, token in self.accepted
            if (path, token) not in waiting
        ]


def _annotations(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


class ClusterChaos(ChaosDriver):
    variant = "cluster"
    replica_sessions = ("pgsched-tick", "pgsched-publisher", "pgsched-handlers")
    verdict_interval_seconds = VERDICT_INTERVAL_SECONDS
    verdict_stale_view_seconds = verdicts.STALE_VIEW_SECONDS
    # After a long outage the Job controller takes a minute to create pods again: no job
    # to kill or pause meanwhile (two 100 s CI runs missed job_kill/job_pause that way).
    # The replicas' absences wait for a long job's pod to beat through them, and
    # replicas_pause for every replica to have run 30 s: first the pause (while no
    # replica was restarted lately), then the kill, then the outage. (Seed 1385038769,
    # with the kill first: the pause waited 38 s for the restarted replicas, and no
    # other fault was injected meanwhile.)
    late_fault_kinds = ("replicas_pause", "replicas_down", "apiserver_outage")

    def __init__(
        self,
        config: ChaosConfig,
        server: PostgresServer | ReplicatedPostgres,
        work_dir: Any,
        *,
        cluster: ControlPlane,
        namespace: str,
        scheduled_jobs: int = 24,
        requests_per_second: float = 0.3,
        start_timeout_seconds: int | None = HEARTBEAT["orphanTimeoutSeconds"],
        long_jobs: int = 0,
        endpoints_back_after: tuple[float, float] = (1.0, 5.0),
    ) -> None:
        """``start_timeout_seconds``: the ScheduledJobs' bound on a launching run (a run
        whose workload has not started is bounded by it, not by the orphan timeout; None:
        the product's default). ``long_jobs``: ScheduledJobs of 50 s workloads on top
        (``long_job_spec``), for pods to beat through the replicas' absences.
        ``endpoints_back_after``: the range of seconds after ``replicas_pause`` wakes the
        replicas before their endpoints are back (a readiness probe's delay)."""
        super().__init__(config, server, work_dir)  # type: ignore[arg-type]
        if config.planted not in (None, *PLANTED):
            raise ValueError(f"unknown planted bug {config.planted!r} (one of {PLANTED})")
        self.cluster = cluster
        self.namespace = namespace
        self._count = scheduled_jobs
        self._per_second = requests_per_second
        self._start_timeout = start_timeout_seconds
        self._long_jobs = [f"chaos-long-{index}" for index in range(long_jobs)]
        self._endpoints_back_after = endpoints_back_after
        self.operators = Operators(cluster, self.dsn, namespace, work_dir)
        self.handles: dict[int, OperatorProcess] = {}
        self._started: dict[int, float] = {}  # replica index → when (monotonic) it started
        self._collection = f"/apis/{names.API_VERSION}/namespaces/{namespace}/{names.PLURAL}"
        self._paths: list[str] = []
        self._recorder: jobside.JobRecorder | None = None
        self._annotations: Annotations | None = None
        self._pods: jobside.PodRecorder | None = None
        self.outages: list[dict[str, Any]] = []  # the long API server outages injected
        self.absences: list[dict[str, Any]] = []  # every replicas_down injected

    def prepare(self) -> None:
        with connection.connect(self.dsn, application_name="chaos-setup") as conn:
            invariants.install_run_audit(conn)
            if self.config.planted == "no-adoption":
                conn.execute(_NO_LEASE_IS_GENUINE)
            elif self.config.planted == "presence-blind-reaper":
                conn.execute(_PRESENCE_BLIND_SILENCE)
        self._recorder = jobside.JobRecorder(self.cluster.api, self.namespace)
        self._pods = jobside.PodRecorder(self.cluster.api, self.namespace)

    def start_replica(self, index: int) -> subprocess.Popen[bytes]:
        handle = self.operators.start(wait=False, **OPERATOR_ENV)
        self.handles[index] = handle
        self._started[index] = time.monotonic()
        return handle.process

    def start_load(self) -> None:
        deadline = time.monotonic() + 120
        while not all(handle.healthy() for handle in self.handles.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"operators not healthy; logs in {self.work_dir}")
            time.sleep(0.5)
        rng = random.Random(f"{self.config.seed}:scheduledjobs")
        for index in range(self._count):
            name = f"chaos-{index:02d}"
            manifest = {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": scheduled_job_spec(rng, index, start_timeout_seconds=self._start_timeout),
            }
            self.cluster.api.create(self._collection, manifest)
            self._paths.append(f"{self._collection}/{name}")
        requested = list(self._paths)  # the long ones get no run-now requests
        for index, name in enumerate(self._long_jobs):
            manifest = {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": long_job_spec(index, start_timeout_seconds=self._start_timeout),
            }
            self.cluster.api.create(self._collection, manifest)
            self._paths.append(f"{self._collection}/{name}")
        self._annotations = Annotations(
            self.cluster.api,
            requested,
            random.Random(f"{self.config.seed}:requests"),
            per_second=self._per_second,
        )
        self._annotations.start()

    def stop_load(self) -> None:
        if self._annotations is not None and self._annotations.is_alive():
            self._annotations.stop()

    def quiesce(self) -> None:
        for path in self._paths:
            deadline = time.monotonic() + 120
            while True:
                try:
                    self.cluster.api.patch(path, {"spec": {"suspend": True}})
                    break
                except (ApiError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)

    def job_processes(self) -> dict[int, list[int]]:
        pods = self.cluster.api.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        return faults.processes_by_run(pod["metadata"]["uid"] for pod in pods)

    def verdict_evidence(self) -> dict[int, float]:
        return dict(self._recorder.recorded) if self._recorder else {}

    def variant_faults(self) -> dict[str, tuple[float, Fault]]:
        found: dict[str, tuple[float, Fault]] = {
            "apiserver_restart": (1.0, self.restart_apiserver),
            "apiserver_outage": (0.6, self.stop_apiserver_while_jobs_run),
            "replicas_down": (1.0, self.kill_every_replica),
            "replicas_pause": (0.6, self.freeze_every_replica),
        }
        if isinstance(self.server, ReplicatedPostgres):
            pair = self.server
            found["failover"] = (3.0, lambda rng: pair.failover(hold=self._a_workload_starts))
        return found

    def _a_workload_starts(self, timeout: float = 20.0) -> bool:
        """Wait (while the standby receives nothing) until a Job created from now on has
        its workload started: each failover then loses a launch whose workload runs, not
        only whatever the lag happened to catch."""
        assert self._recorder is not None and self._pods is not None
        before = set(self._recorder.launched)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self._recorder.launched.keys() - before) & self._pods.started.keys():
                return True
            time.sleep(0.05)
        return False

    def restart_apiserver(self, rng: random.Random) -> str | None:
        downtime = rng.uniform(1.0, 4.0)
        started = time.monotonic()
        with self.api_away():
            self.cluster.restart_apiserver(downtime=downtime)
        return (
            f"API server down {downtime:.1f}s, ready again after {time.monotonic() - started:.1f}s"
        )

    def stop_apiserver_while_jobs_run(self, rng: random.Random) -> str | None:
        """The API server process stopped for ``config.api_outage_seconds`` while Jobs
        run: their workloads end unseen (kubelet and containers keep going, the heartbeat
        sidecar talks to Postgres), so their outcomes wait in the Jobs' status."""
        pods = self.cluster.api.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        uids = [pod["metadata"]["uid"] for pod in pods]
        running = set(faults.processes_by_run(uids))
        if not running:
            return None  # owed: an outage with no Job running proves nothing
        seconds = rng.uniform(*self.config.api_outage_seconds)
        started = time.monotonic()
        with self.api_away():
            self.cluster.stop_apiserver()
            time.sleep(seconds)
            ended = running - set(faults.processes_by_run(uids))
            self.cluster.start_apiserver(timeout=180)
        self.outages.append(
            {
                "seconds": round(time.monotonic() - started, 1),
                "back_at": time.time(),
                "workloads_ended": sorted(ended),
            }
        )
        return (
            f"API server stopped {seconds:.0f}s (ready again after"
            f" {time.monotonic() - started:.0f}s); {len(running)} runs' pods were running,"
            f" {len(ended)} of them ended during the outage: {sorted(ended)}"
        )

    def kill_every_replica(self, rng: random.Random) -> str | None:
        """Kill -9 every operator replica at once and keep them down for
        ``config.replicas_down_seconds`` while pods run (their heartbeats fail throughout:
        no replica serves the run API), then let the supervisor start them again; done
        when the run API is available again (``pgsched.run_api_presence``). The absence
        is recorded from the kill to that moment."""
        seconds = rng.uniform(*self.config.replicas_down_seconds)
        beating = self._beating_through(seconds)
        if not beating:
            return None  # owed: an absence no pod beats through proves nothing
        with self.replicas_away() as absence:
            with self.supervisor.all_down() as pids:
                time.sleep(seconds)
            restarted = time.time()
            back = absence[1] = self._run_api_back(after=restarted)
        return self._absent("replicas_down", absence[0], restarted, back, beating) + (
            f"; all {len(pids)} replicas (pids {pids}) killed, restarted after {seconds:.1f}s"
        )

    def freeze_every_replica(self, rng: random.Random) -> str | None:
        """SIGSTOP of every operator replica at once for ``config.replicas_down_seconds``,
        then SIGCONT: the same absence as ``replicas_down`` for the pods, but the replicas
        wake where they were, nothing restarted (a frozen node, a paused VM), so nothing
        but the run API's presence tells the reaper that nobody could beat. Their
        endpoints leave the Service while they sleep and come back 1-5 s after they wake,
        as the chart's readiness probe (every 5 s, 2 failures) takes them out and back;
        the stamps of presence resume at once. Recorded from the freeze to the run API's
        return as the database has it (the first stamp after the gap). Owed until every
        replica has run for the verdicts' wait after a start
        (``verdict_stale_view_seconds``), which would cover a silence on its own."""
        seconds = rng.uniform(*self.config.replicas_down_seconds)
        now = time.monotonic()
        if any(now - at < self.verdict_stale_view_seconds for at in self._started.values()):
            return None
        beating = self._beating_through(seconds)
        if not beating:
            return None  # owed, as replicas_down
        handles = [handle for handle in self.handles.values() if handle.process.poll() is None]
        pids = sorted(handle.pid for handle in handles)
        unready = rng.uniform(*self._endpoints_back_after)
        with self.replicas_away() as absence:
            for pid in pids:
                self.freezer.freeze(pid, seconds + 5)  # (thawed below; the timer if not)
            for handle in handles:
                if handle.run_api.service is not None:
                    self.cluster.withdraw_host_port(handle.run_api.service, handle.run_api.port)
            time.sleep(seconds)
            for pid in pids:
                self.freezer.thaw(pid)
            thawed = time.time()
            back = absence[1] = self._run_api_back(after=thawed)
            time.sleep(max(0.0, thawed + unready - time.time()))
            for handle in handles:
                if handle.run_api.service is not None and handle.process.poll() is None:
                    # Not waiting for kube-proxy to route it: the absence ends when the
                    # database sees the replicas' presence again (``_run_api_back``), and
                    # a wait here (30 s at most, seen three times in one loaded run) held
                    # up the faults still owed.
                    self.cluster.publish_host_port(
                        handle.run_api.service,
                        handle.run_api.port,
                        service_port=run_api.SERVICE_PORT,
                        wait=False,
                    )
        return self._absent("replicas_pause", absence[0], thawed, back, beating) + (
            f"; all {len(pids)} replicas (pids {pids}) frozen {seconds:.1f}s, their endpoints"
            f" back {unready:.1f}s after they woke"
        )

    def _beating_through(self, seconds: float) -> list[int]:
        """Runs whose pods beat now and will still run when every replica is back after
        ``seconds`` away: long jobs claimed recently enough. Without long jobs, any run
        whose pod beats now."""
        window = LONG_JOB_SECONDS - seconds - OUTLAST_MARGIN_SECONDS

        def find(conn: Connection) -> list[int]:
            rows = conn.execute(
                "SELECT r.id FROM pgsched.job_runs AS r"
                " JOIN pgsched.job_definitions AS d ON d.id = r.definition_id"
                " WHERE r.status = 'RUNNING' AND d.namespace = %(ns)s"
                " AND r.heartbeat_at > now() - interval '3 seconds'"
                " AND (%(any)s OR (d.name = ANY(%(long)s)"
                "      AND r.started_at > now() - make_interval(secs => %(window)s)))"
                " ORDER BY r.id",
                {
                    "ns": self.namespace,
                    "any": not self._long_jobs,
                    "long": self._long_jobs,
                    "window": window,
                },
            ).fetchall()
            return [int(row["id"]) for row in rows]

        return self.patiently(find)

    def _absent(
        self, kind: str, gone: float, returned: float, back: float, beating: list[int]
    ) -> str:
        running = sorted(self.job_processes())
        self.absences.append(
            {"kind": kind, "gone": gone, "returned": returned, "back": back, "beating": beating}
        )
        return (
            f"the run API away {back - gone:.1f}s (replicas back after {returned - gone:.1f}s);"
            f" runs beating through it: {beating}; runs whose pods run now: {running}"
        )

    def _run_api_back(self, *, after: float, timeout: float = 180.0) -> float:
        """When (epoch s, the database's clock) the run API was available again: a replica
        started after ``after`` stamped its presence. After a gap longer than the reaper's
        allowance the first stamp moves ``available_since``; it is that moment."""

        def presence(conn: Connection) -> dict[str, Any] | None:
            return conn.execute(
                "SELECT extract(epoch FROM available_since)::float8 AS since,"
                " extract(epoch FROM seen_at)::float8 AS seen FROM pgsched.run_api_presence"
            ).fetchone()

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.patiently(presence)
            if row is not None and row["seen"] > after:
                return float(max(row["since"], after))
            time.sleep(0.2)
        raise HarnessError(
            f"no operator replica served the run API within {timeout:.0f}s of their restart;"
            f" logs in {self.work_dir}"
        )

    def launches(self, conn: Connection) -> list[tuple[int, str]]:
        assert self._recorder is not None
        return self._recorder.launches()

    def variant_checks(self, conn: Connection) -> dict[str, list[str]]:
        """I3 on the cluster: after the drain nothing of an ended run is still running.
        I8: succeeded work is not run again (``succeeded_work_kept``). And the job side's
        I1 and I3 (``jobside.failover_violations``), in every variant: the pod watch runs
        in each (it gives I8 the ends pods report)."""
        deadline = time.monotonic() + 90
        while True:
            leftovers = self._still_running(conn)
            if not leftovers or time.monotonic() > deadline:
                found = {"I3": leftovers, "I8": self.succeeded_work_kept(conn)}
                break
            time.sleep(2)
        if self._pods is not None and self._recorder is not None:
            after_failovers = jobside.failover_violations(
                conn,
                dict(self._recorder.launched),
                dict(self._pods.started),
                self._annotations.acknowledged() if self._annotations else [],
            )
            for invariant, problems in after_failovers.items():
                found[invariant] = found.get(invariant, []) + problems
        found[REAPED_ONLY_IF_HURT] = reaps_without_job_fault(
            conn, self.job_victims, self.replicas_absences()
        )
        injected = {absence["kind"] for absence in self.absences}
        for kind in ("replicas_down", "replicas_pause"):
            if kind in self._faults() and kind not in injected:
                found[REAPED_ONLY_IF_HURT].append(
                    f"{kind} was among this run's faults and never injected: nothing showed"
                    " that the operator's absence is not taken for its pods' silence"
                )
        return found

    def succeeded_work_kept(self, conn: Connection) -> list[str]:
        """I8 from the Jobs' side (:func:`succeeded_work_violations`)."""
        assert self._recorder is not None and self._pods is not None
        ended = dict(self._pods.ended)
        pod_ended = {
            launched.run_id: ended[uid]
            for uid, launched in self._recorder.launched.items()
            if uid in ended
        }
        return succeeded_work_violations(
            conn, sorted(self._recorder.succeeded), dict(self._recorder.recorded), pod_ended
        )

    def _still_running(self, conn: Connection) -> list[str]:
        jobs = self.cluster.api.get(
            f"/apis/batch/v1/namespaces/{self.namespace}/jobs",
            labelSelector=names.LABEL_RUN_ID,
        ).get("items", [])
        processes = self.job_processes()
        run_ids = {int(job["metadata"]["labels"][names.LABEL_RUN_ID]) for job in jobs}
        statuses = {
            row["id"]: row["status"]
            for row in conn.execute(
                "SELECT id, status FROM pgsched.job_runs WHERE id = ANY(%s)",
                [sorted(run_ids | set(processes))],
            )
        }
        problems = []
        for job in jobs:
            run_id = int(job["metadata"]["labels"][names.LABEL_RUN_ID])
            finished = any(
                c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                for c in (job.get("status") or {}).get("conditions") or []
            )
            if not finished:
                problems.append(
                    f"Job {job['metadata']['name']} is still active but its run {run_id} is"
                    f" {statuses.get(run_id)}"
                )
        for run_id, pids in processes.items():
            problems.append(
                f"run {run_id} is {statuses.get(run_id)} but its pod processes {pids} still run"
            )
        return problems

    def variant_stats(self, conn: Connection) -> dict[str, Any]:
        succeeded = sorted(self._recorder.succeeded) if self._recorder else []
        reaped = conn.execute(
            "SELECT id FROM pgsched.job_runs WHERE id = ANY(%s) AND reason = 'HeartbeatLost'",
            [succeeded],
        ).fetchall()
        sampled = self.sampler.result
        return {
            "API server outages (s down; runs whose workload ended meanwhile; verdicts"
            " awaited at its return, settled within s)": [
                (outage["seconds"], len(outage["workloads_ended"]), *self._settled(conn, outage))
                for outage in self.outages
            ],
            "runs that awaited a verdict, by outcome": self._verdict_counts(conn),
            "longest verdict wait; longest past its Job's outcome": (
                f"{sampled.max_verdict_wait_seconds:.1f}s; {sampled.max_verdict_late_seconds:.1f}s"
            ),
            "scheduled jobs": self._count,
            # Since outcome-aware reaping (I8) a Job that succeeds while the API server is
            # away awaits its verdict instead of being reaped, so this should stay empty;
            # reported, not yet a violation: a job paused past its timeout whose Job is
            # still active is HeartbeatLost by design, and may finish before it is stopped.
            "runs reaped HeartbeatLost although their Job succeeded": [row["id"] for row in reaped],
            "every replica away at once (replicas_down, replicas_pause)": self._absences(conn),
            "runs whose job processes the chaos killed or paused": len(self.job_victims),
            "run-now annotations": self._annotations.requested if self._annotations else 0,
            "Jobs seen": len(self._recorder.launched) if self._recorder else 0,
            "ends lost in a failover and recorded again (same outcome)": len(
                sampled.recorded_again
            ),
            "Jobs whose workload started; ended (as their pods report)": (
                f"{len(self._pods.started)}; {len(self._pods.ended)}" if self._pods else 0
            ),
            "operator processes started": len(self.operators.started),
            # So that a failed CI run says why each of them ended, without its database.
            "runs FAILED or CANCELLED (first 12)": self._unsuccessful(conn),
        }

    def _absences(self, conn: Connection) -> list[str]:
        """Each ``replicas_down`` or ``replicas_pause``: how long, and what became of the
        runs whose pods beat through it."""
        lines = []
        for absence in self.absences:
            ended = conn.execute(
                "SELECT status || coalesce('/' || reason, '') AS what, count(*) AS n"
                " FROM pgsched.job_runs WHERE id = ANY(%s) GROUP BY 1 ORDER BY 1",
                [absence["beating"]],
            ).fetchall()
            lines.append(
                f"{absence['kind']}: replicas back after"
                f" {absence['returned'] - absence['gone']:.1f}s, the run API after"
                f" {absence['back'] - absence['gone']:.1f}s; the {len(absence['beating'])} runs"
                " beating through it ended "
                + ", ".join(f"{row['what']} {row['n']}" for row in ended)
            )
        return lines

    def _unsuccessful(self, conn: Connection) -> list[str]:
        rows = conn.execute(
            "SELECT id, status, reason, left(error, 240) AS error,"
            " pgsched.iso_utc(cancel_requested_at) AS asked,"
            " pgsched.iso_utc(workload_ended_at) AS ended,"
            " pgsched.iso_utc(finished_at) AS finished"
            " FROM pgsched.job_runs WHERE status IN ('FAILED', 'CANCELLED') ORDER BY id LIMIT 12"
        ).fetchall()
        return [
            f"run {row['id']} {row['status']}/{row['reason']} at {row['finished']}"
            f" (cancel asked {row['asked']}, workload ended {row['ended']}): {row['error']}"
            for row in rows
        ]

    def _settled(self, conn: Connection, outage: dict[str, Any]) -> tuple[int, float]:
        """How many runs awaited a verdict when the API server came back, and how long
        after that the last of them ended."""
        row = conn.execute(
            "SELECT count(*) AS n, extract(epoch FROM max(finished_at)) AS last"
            " FROM pgsched.job_runs WHERE outcome_pending_at <= to_timestamp(%(back)s)"
            " AND finished_at > to_timestamp(%(back)s)",
            {"back": outage["back_at"]},
        ).fetchone()
        if row is None or not row["n"]:
            return 0, 0.0
        return int(row["n"]), round(float(row["last"]) - outage["back_at"], 1)

    def _verdict_counts(self, conn: Connection) -> dict[str, int]:
        rows = conn.execute(
            "SELECT status || coalesce('/' || reason, '') AS what, count(*) AS n"
            " FROM pgsched.job_runs WHERE outcome_pending_at IS NOT NULL GROUP BY 1 ORDER BY 1"
        ).fetchall()
        return {row["what"]: row["n"] for row in rows}

    def teardown(self) -> None:
        if self._recorder is not None:
            self._recorder.stop()
        if self._pods is not None:
            self._pods.stop()


def succeeded_work_violations(
    conn: Connection,
    succeeded: list[int],
    recorded: dict[int, float],
    pod_ended: dict[int, datetime] | None = None,
) -> list[str]:
    """I8 from the Jobs' side: a run whose Job succeeded (``succeeded``; ``recorded``: when
    the Job watch's evidence saw each outcome, UNIX time) ends COMPLETED — unless the API
    confirmed it silent (its Job active, its workload not ended) before the success was on
    record: a job frozen past its timeout, which may wake and finish after its lease is
    gone (the documented at-least-once case). Failing a run whose success the Job watch had
    already seen, or whose sidecar had reported the workload's end, and so retrying it, is
    running succeeded work again; so is calling it CANCELLED for a cancel requested after
    its workload ended (nothing was left to stop).

    One exit from the rule, by design (README, Cancellation): a cancel requested while the
    workload still ran makes the run CANCELLED even if its container then exits 0, since
    exiting 0 after reading the cancel file is how a cooperative container stops; exit 0
    cannot tell that from finishing anyway. Such a run is not retried. The workload's end
    is its sidecar's note or, without one, the end its pod reported (``pod_ended``: run id
    → kubelet's ``finishedAt``, to the second; the product allows
    ``outcomes.POD_END_MARGIN`` for that)."""
    pod_ended = pod_ended or {}
    rows = conn.execute(
        "SELECT r.id, r.status, r.reason, r.finished_at, r.workload_ended_at,"
        " r.cancel_requested_at,"
        " (SELECT n.id FROM pgsched.job_runs AS n WHERE n.retry_of = r.id) AS retried_as"
        " FROM pgsched.job_runs AS r WHERE r.id = ANY(%s) AND r.status <> 'COMPLETED'",
        [succeeded],
    ).fetchall()
    problems = []
    for row in rows:
        seen = recorded.get(row["id"])
        finished = row["finished_at"].timestamp() if row["finished_at"] else None
        ended = row["workload_ended_at"]
        asked = row["cancel_requested_at"]
        reported = pod_ended.get(row["id"])
        if row["status"] == "CANCELLED" and row["retried_as"] is None and asked is not None:
            if ended is not None and asked < ended:
                continue  # cancelled while it ran: CANCELLED by design, not run again
            if ended is None and reported is not None and asked < reported + POD_END_MARGIN:
                continue  # the same, by the end its pod reported
        known = []
        if seen is not None and finished is not None and seen <= finished:
            known.append(f"its Job's success was seen at {datetime.fromtimestamp(seen, UTC)}")
        if ended is not None and finished is not None and ended <= row["finished_at"]:
            known.append(f"its sidecar reported the workload ended at {ended}")
        if (
            ended is None
            and reported is not None
            and reported + POD_END_MARGIN <= row["finished_at"]
        ):
            known.append(f"its pod reported the workload ended at {reported}")
        if known:
            again = f", and was executed again as run {row['retried_as']}"
            problems.append(
                f"run {row['id']}: {' and '.join(known)}, yet it ended"
                f" {row['status']}/{row['reason']} at {row['finished_at']}"
                + (f" (cancel requested at {asked})" if asked is not None else "")
                + (again if row["retried_as"] else "")
            )
    return problems


def reaps_without_job_fault(
    conn: Connection,
    hurt: dict[int, list[str]],
    absences: list[tuple[float, float]],
) -> list[str]:
    """``REAPED_ONLY_IF_HURT``: every run FAILED HeartbeatLost or Orphaned, but those whose
    job's processes the chaos killed or paused (``hurt``: run id → the faults), is a
    violation. Nothing else in the chaos touches a pod: the other faults hit the replicas,
    Postgres and the API server, and pods keep running through all of them, so such a run
    was judged silent for the operator's (or the database's) trouble, not its own.

    Each is told with its last heartbeat, how long it had been silent when judged (its
    verdict asked, or it was failed) and the times no replica was there in its silence
    (``absences``: ``[start, end]``, epoch seconds, from the kill to the run API's return),
    with how long it had been silent counted from that return: what
    ``pgsched.silent_since`` counts."""
    rows = conn.execute(
        "SELECT r.id, r.reason, r.heartbeat_at, r.started_at, r.outcome_pending_at,"
        " r.finished_at, d.heartbeat_timeout_seconds AS timeout"
        " FROM pgsched.job_runs AS r JOIN pgsched.job_definitions AS d ON d.id = r.definition_id"
        " WHERE r.status = 'FAILED' AND r.reason IN ('HeartbeatLost', 'Orphaned') ORDER BY r.id"
    ).fetchall()
    problems = []
    for row in rows:
        if row["id"] in hurt:
            continue
        since = row["heartbeat_at"] or row["started_at"]
        judged = row["outcome_pending_at"] or row["finished_at"]
        gaps = [
            (start, end)
            for start, end in absences
            if start < judged.timestamp() and end > since.timestamp()
        ]
        if gaps:
            returned = max(end for _, end in gaps)
            where = (
                "; no replica was there "
                + ", ".join(
                    f"{_utc(start)} to {_utc(end)} ({end - start:.1f}s)" for start, end in gaps
                )
                + f" in its silence, which when judged had lasted"
                f" {judged.timestamp() - max(returned, since.timestamp()):.1f}s since the run"
                " API's return"
            )
        else:
            where = "; every replica was gone at no time of its silence"
        asked = (
            f", its verdict asked at {row['outcome_pending_at']}"
            if row["outcome_pending_at"]
            else ""
        )
        problems.append(
            f"run {row['id']} ended FAILED/{row['reason']} at {row['finished_at']}{asked},"
            " and the chaos never killed or paused its job's processes: last heartbeat"
            f" {row['heartbeat_at'] or 'never'} (claimed {row['started_at']}), silent"
            f" {(judged - since).total_seconds():.1f}s when judged (timeout"
            f" {row['timeout']}s){where}"
        )
    return problems


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
