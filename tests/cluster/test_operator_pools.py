"""Concurrency pools on the cluster: the limit seen from the API (Jobs with active pods),
the pool's printer columns, and a job waiting for a pool that does not exist yet."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from uuid import UUID

import pytest
import yaml

from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s.client import api as operator_api
from pgsched.k8s.client.watch import Event
from pgsched.k8s.kinds import concurrencypools
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjob_writer, scheduledjobs
from plugins.operator import busybox

pytestmark = pytest.mark.cluster


def apply_pool(cluster, namespace: str, name: str, limit: int) -> None:
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ConcurrencyPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"limit": limit},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def condition(sj, name: str, kind: str) -> dict | None:
    found = [c for c in sj.get(name).get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else None


def test_a_pool_of_two_shared_by_four_jobs_never_has_three_jobs_running(
    operators, sj, cluster, namespace
):
    operators.start()
    operators.start()
    apply_pool(cluster, namespace, "warehouse", 2)
    names = [f"export-{index}" for index in range(4)]
    for name in names:
        sj.apply(
            name,
            {
                "schedule": "0 0 1 1 *",
                "pool": "warehouse",
                "maxConcurrentRuns": 2,
                "jobTemplate": busybox("sleep 3"),
            },
        )
    peak = {"jobs": 0, "columns": ""}
    stop = threading.Event()

    def watch_active_jobs() -> None:
        while not stop.is_set():
            jobs = json.loads(cluster.kubectl("get", "jobs", "-n", namespace, "-o", "json").stdout)
            active = sum(1 for job in jobs["items"] if (job.get("status") or {}).get("active"))
            peak["jobs"] = max(peak["jobs"], active)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_active_jobs)
    watcher.start()
    try:
        for name in names:
            for token in ("a", "b"):
                sj.annotate(name, "pgsched.dev/run-now", f"{name}-{token}")
        # While the eight runs drain two at a time, the pool's columns show it.
        peak["columns"] = wait_for(
            lambda: (
                (out := cluster.kubectl("get", "concurrencypools", "-n", namespace).stdout)
                and " 2 " in out.splitlines()[1]
                and out
            ),
            60,
            describe=lambda: "kubectl get concurrencypools to show the pool",
        )
        for name in names:
            sj.wait_runs(
                name,
                lambda runs: len(runs) == 2 and all(r["status"] == "COMPLETED" for r in runs),
                180,
                "both runs to complete",
            )
    finally:
        stop.set()
        watcher.join()

    assert peak["jobs"] == 2, peak  # the pool was full, and never over
    header, row = peak["columns"].splitlines()[:2]
    assert header.split()[:4] == ["NAME", "LIMIT", "RUNNING", "QUEUED"], header
    assert row.split()[:2] == ["warehouse", "2"], row
    intervals = [(run["started_at"], run["finished_at"]) for name in names for run in sj.runs(name)]
    for moment, _ in intervals:
        assert sum(1 for start, end in intervals if start <= moment < end) <= 2
    status = json.loads(
        cluster.kubectl("get", "cpool", "warehouse", "-n", namespace, "-o", "json").stdout
    )["status"]
    wait_for(
        lambda: (
            json.loads(
                cluster.kubectl("get", "cpool", "warehouse", "-n", namespace, "-o", "json").stdout
            )["status"]
            == {"running": 0, "queued": 0, "jobs": 4}
        ),
        30,
        describe=lambda: f"the pool's status to settle (was {status})",
    )


def test_a_job_naming_a_missing_or_deleted_pool_waits_with_a_condition(
    operators, sj, cluster, namespace
):
    operators.start()
    sj.apply(
        "lonely",
        {"schedule": "0 0 1 1 *", "pool": "licence", "jobTemplate": busybox("true")},
        annotations={"pgsched.dev/run-now": "now"},
    )
    missing = wait_for(
        lambda: condition(sj, "lonely", "PoolReady"),
        60,
        describe=lambda: "the PoolReady condition",
    )
    assert (missing["status"], missing["reason"]) == ("False", "PoolNotFound")
    assert "ConcurrencyPool licence does not exist" in missing["message"]
    time.sleep(3)
    assert [run["status"] for run in sj.runs("lonely")] == ["QUEUED"]
    # Not Ready either (no run can start), and the queued run says what it waits for.
    assert (condition(sj, "lonely", "Ready") or {}).get("reason") == "PoolNotFound"
    said = f"pool licence (no ConcurrencyPool licence in namespace {namespace})"
    waiting = wait_for(
        lambda: sj.get("lonely").get("status", {}).get("waiting"),
        60,
        describe=lambda: "status.waiting",
    )
    assert (waiting["reason"], waiting["message"]) == ("PoolNotFound", said)
    wait_for(
        lambda: any(
            event["reason"] == "RunWaiting" and event["message"].endswith(f"waits for {said}")
            for event in sj.events("lonely")
        ),
        30,
        describe=lambda: "the RunWaiting Event",
    )

    apply_pool(cluster, namespace, "licence", 1)

    sj.wait_runs(
        "lonely", lambda runs: runs and runs[0]["status"] == "COMPLETED", 60, "the run to complete"
    )
    ready = wait_for(
        lambda: (
            (found := condition(sj, "lonely", "PoolReady")) and found["status"] == "True" and found
        ),
        60,
        describe=lambda: "PoolReady to turn True",
    )
    assert ready["reason"] == "PoolFound"

    # Deleted while the job still names it: the condition says so and new runs wait again.
    cluster.kubectl("delete", "cpool", "licence", "-n", namespace, "--wait=true")
    wait_for(
        lambda: (found := condition(sj, "lonely", "PoolReady")) and found["status"] == "False",
        60,
        describe=lambda: "PoolReady to turn False after the pool was deleted",
    )
    sj.annotate("lonely", "pgsched.dev/run-now", "again")
    sj.wait_runs("lonely", lambda runs: len(runs) == 2, 30, "the second run to be queued")
    time.sleep(3)
    assert [run["status"] for run in sj.runs("lonely")] == ["COMPLETED", "QUEUED"]


# -- A pool's members and the other writers of their statuses ----------------------------
#
# The interleavings below are planted by wrapping the API client these tests hand to the
# operator's own classes: a hook runs the other writer at the moment the race needs it.


class HookedKube:
    """The real API client; ``before_status`` / ``after_status`` run once, around the first
    status patch that goes through this client."""

    def __init__(self, kube, *, before_status=None, after_status=None, fail_status=0):
        self._kube = kube
        self.before_status, self.after_status = before_status, after_status
        self.fail_status = fail_status  # status patches to refuse (503) before letting one by

    def __getattr__(self, name):
        return getattr(self._kube, name)

    def merge_patch(self, path, body):
        if not path.endswith("/status"):
            return self._kube.merge_patch(path, body)
        if self.fail_status:
            self.fail_status -= 1
            raise operator_api.ApiError("PATCH", path, 503, {"reason": "ServiceUnavailable"})
        hook, self.before_status = self.before_status, None
        if hook:
            hook()
        answer = self._kube.merge_patch(path, body)
        hook, self.after_status = self.after_status, None
        if hook:
            hook()
        return answer


@pytest.fixture
def pooled_job(operators, sj, cluster, namespace):
    """A ScheduledJob in ConcurrencyPool ``licence`` with PoolReady True, its operator
    stopped (the test plays the operator's parts), and what the parts need."""
    operators.start()
    apply_pool(cluster, namespace, "licence", 1)
    sj.apply("member", {"schedule": "0 0 1 1 *", "pool": "licence", "jobTemplate": busybox("true")})
    wait_for(
        lambda: (found := condition(sj, "member", "PoolReady")) and found["status"] == "True",
        60,
        describe=lambda: "PoolReady to turn True",
    )
    operators.stop_all()
    kube = operator_api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    database = connection.pool(operators.dsn, name="pool-race-test", max_size=4)
    try:
        yield SimpleNamespace(
            kube=kube,
            database=database,
            uid=UUID(sj.get("member")["metadata"]["uid"]),
            pool_path=operator_api.pool_path(namespace, "licence"),
            sj_path=operator_api.scheduled_job_path(namespace, "member"),
        )
    finally:
        database.close()


def delete_pool(cluster, namespace, job) -> dict:
    """Delete the pool; pgsched's finalizer holds it: the object with its deletionTimestamp."""
    cluster.kubectl("delete", "cpool", "licence", "-n", namespace, "--wait=false")
    body = job.kube.get(job.pool_path)
    assert body["metadata"].get("deletionTimestamp")
    return body


def handle_deletion(job, body, kube) -> float | None:
    """What the operator's Pools handler does with the deletion, talking through ``kube``."""
    handler = concurrencypools.Pools(job.database, kube, Publisher(kube), clock=lambda: None)
    return handler.handle(body["metadata"]["uid"], Event("MODIFIED", body))


def test_a_status_rendered_before_the_pool_was_deleted_is_not_written_over_the_newer_one(
    pooled_job, sj, cluster, namespace
):
    # The publisher renders the member (pool still there: PoolReady True); before its patch
    # arrives, the pool is deleted and the handler writes PoolReady False. Sent as rendered,
    # the publisher's patch would put True back, for good. It names the version it read, is
    # refused, and renders again.
    job = pooled_job
    racing = HookedKube(
        job.kube,
        before_status=lambda: handle_deletion(job, delete_pool(cluster, namespace, job), job.kube),
    )
    with job.database.connection() as conn:
        Publisher(racing).refresh_statuses(conn, [job.uid])
    found = condition(sj, "member", "PoolReady")
    assert (found["status"], found["reason"]) == ("False", "PoolNotFound")


def test_the_pool_handler_writes_its_members_statuses_after_its_change_commits(
    pooled_job, sj, cluster, namespace
):
    # Right after the handler's own patch of the member, the publisher renders the member
    # too. Had the handler patched inside its transaction, the publisher would still see the
    # pool (the deletion uncommitted), read the handler's version and write True over it.
    job = pooled_job

    def publisher_renders_now():
        with job.database.connection() as conn:
            Publisher(job.kube).refresh_statuses(conn, [job.uid])

    racing = HookedKube(job.kube, after_status=publisher_renders_now)
    assert handle_deletion(job, delete_pool(cluster, namespace, job), racing) is None
    found = condition(sj, "member", "PoolReady")
    assert (found["status"], found["reason"]) == ("False", "PoolNotFound")


def test_a_member_refresh_that_failed_is_done_by_the_retry(pooled_job, sj, cluster, namespace):
    # The pool's deletion is stored, but the member's status cannot be written (the API
    # server refuses): the handler asks for a retry, keeps the finalizer, and the retry —
    # seeing the pool already gone from the database — still writes the member's status.
    job = pooled_job
    deleted = delete_pool(cluster, namespace, job)
    refusing = HookedKube(job.kube, fail_status=1)
    assert handle_deletion(job, deleted, refusing) is not None
    assert condition(sj, "member", "PoolReady")["status"] == "True"
    assert job.kube.get(job.pool_path)["metadata"]["finalizers"]  # held until it is done

    assert handle_deletion(job, deleted, job.kube) is None
    found = condition(sj, "member", "PoolReady")
    assert (found["status"], found["reason"]) == ("False", "PoolNotFound")


def test_a_spec_change_synced_while_the_pool_is_deleted_ends_with_the_pool_gone(
    pooled_job, sj, cluster, namespace
):
    # The job's new spec is synced and its status rendered (pool there); before the status
    # is written, the pool is deleted and its handler writes PoolReady False. The sync's
    # write names the version it rendered against, is refused, and renders again.
    job = pooled_job
    cluster.kubectl(
        "patch", "sj", "member", "-n", namespace, "--type=merge", "-p",
        json.dumps({"spec": {"schedule": "0 0 2 1 *"}}),
    )  # fmt: skip
    racing = HookedKube(
        job.kube,
        before_status=lambda: handle_deletion(job, delete_pool(cluster, namespace, job), job.kube),
    )
    context = scheduledjobs.Context(
        pool=job.database, kube=racing, publisher=Publisher(racing), clock=lambda: None
    )
    synced = scheduledjobs.sync(context, job.kube.get(job.sj_path), revalidate=False)
    assert synced.writes is not None and synced.writes.status
    assert scheduledjob_writer.write(context, synced.writes) is None

    body = job.kube.get(job.sj_path)
    found = condition(sj, "member", "PoolReady")
    assert (found["status"], found["reason"]) == ("False", "PoolNotFound")
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
