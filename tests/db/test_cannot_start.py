"""A job whose runs cannot start as specified (Pod Security refused its pod, its image cannot
be pulled, the API server refused its Job) is not Ready, in the same words on every screen:
its Ready condition (what `kubectl get sj` READY, describe and doctor read), the UI's health
and doctor from the database. It is Ready again once a run's workload starts or its spec
changes; a retry waiting to be launched does not make it flap; a job that waits for room on
the node (Unschedulable) is not "cannot start". A refused launch whose claim the publisher
reads after the refusal gets no RunLaunched Event (docs/operations.md: when it still does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from factories import define
from pgsched.cli import doctor_cmd
from pgsched.engine import definitions, dispatch, lease, runs, settle, starts
from pgsched.engine.launcher import LaunchError
from pgsched.engine.models import Definition, Run
from pgsched.k8s.client.endings import NamespaceEndings
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.ui import pieces, store

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
REFUSAL = "pods 'x' is forbidden: violates PodSecurity 'restricted:latest': runAsNonRoot != true"


@dataclass
class Refusing:
    """A launcher as the Kubernetes one is when Pod Security refuses the pod: the Job is
    not recorded, the run ends PodSecurityRejected. ``refuse`` False: it launches."""

    refuse: bool = True
    launched: list[int] = field(default_factory=list)

    def launch(self, run: Run, definition: Definition) -> str:
        if self.refuse:
            raise LaunchError(REFUSAL, reason=starts.POD_SECURITY_REJECTED)
        self.launched.append(run.id)
        return f"{definition.name}-{run.id}"


def run_now(conn, definition, token, launcher, second):
    runs.run_now(conn, definition.id, token=token, scheduled_for=T0 + timedelta(seconds=second))
    return dispatch.run_once(
        conn, launcher, definition_ids=[definition.id], now=T0 + timedelta(seconds=second)
    )


def ready(conn, definition_id):
    definition = definitions.get(conn, definition_id)
    assert definition is not None
    rendered = Publisher(kube=None).render_status(conn, definition, {"status": {}})  # type: ignore[arg-type]
    return next(c for c in rendered["conditions"] if c["type"] == "Ready")


def overview_badge(conn, definition_id):
    [row] = [
        row
        for row in store.overview(
            conn,
            namespaces=["default"],
            name=None,
            health=None,
            after=("", ""),
            limit=50,
            strip=5,
        )
        if row.definition.id == definition_id
    ]
    return pieces.health_badge(row.definition, row.health, row.refusal)


def test_a_pod_security_refusal_makes_the_job_not_ready_on_every_screen(conn):
    job = define(conn, "rootful", now=T0, schedule="@yearly")
    [refused] = run_now(conn, job, "a", Refusing(), 1).launch_failed
    condition = ready(conn, job.id)
    assert (condition["status"], condition["reason"]) == ("False", "PodSecurityRejected")
    assert f"run {refused} could not start: " in condition["message"]
    assert REFUSAL in condition["message"]
    assert "until the spec or its namespace changes" in condition["message"]
    badge = overview_badge(conn, job.id)
    assert "Cannot start" in badge and "runAsNonRoot" in badge
    finding = doctor_cmd._not_ready_in_database(conn)
    assert finding.status == "warn" and "default/rootful" in finding.detail
    assert f"run {refused} could not start" in finding.detail, "the same words as the condition"


def test_a_run_whose_workload_starts_makes_the_job_ready_again(conn):
    job = define(conn, "fixed-namespace", now=T0, schedule="@yearly")
    run_now(conn, job, "a", Refusing(), 1)
    assert ready(conn, job.id)["status"] == "False"
    [run] = run_now(conn, job, "b", Refusing(refuse=False), 2).claimed
    assert ready(conn, job.id)["status"] == "False", "launched, not started yet: no verdict"
    starts.observe(
        conn, run.id, run.lease_token, workload_started_at=T0 + timedelta(seconds=3), now=T0
    )
    assert ready(conn, job.id)["status"] == "True"


def test_a_changed_spec_deserves_a_try(conn):
    job = define(conn, "edited", now=T0, schedule="@yearly")
    run_now(conn, job, "a", Refusing(), 1)
    assert ready(conn, job.id)["status"] == "False"
    define(conn, "edited", now=T0 + timedelta(minutes=1), generation=2, schedule="@monthly")
    assert ready(conn, job.id)["status"] == "True"


def test_a_retry_waiting_for_its_launch_does_not_make_the_job_flap(conn):
    job = define(
        conn,
        "retried",
        now=T0,
        schedule="@yearly",
        retryPolicy={"maxAttempts": 3, "retryOn": ["PodSecurityRejected"]},
    )
    [first] = run_now(conn, job, "a", Refusing(), 1).launch_failed
    settle.run_once(conn, now=T0 + timedelta(seconds=2))
    retry = conn.execute("SELECT id FROM pgsched.job_runs WHERE retry_of = %s", [first]).fetchone()
    assert retry is not None, "the policy queued a retry"
    claimed = dispatch.claim(conn, definition_ids=[job.id], now=T0 + timedelta(hours=1)).claimed
    assert [run.id for run in claimed] == [retry["id"]]
    assert ready(conn, job.id)["status"] == "False", "RUNNING, launch not yet decided"


def test_waiting_for_room_on_a_node_is_not_cannot_start(conn):
    job = define(conn, "crowded", now=T0, schedule="@yearly")
    [run] = run_now(conn, job, "a", Refusing(refuse=False), 1).claimed
    lease.finish(
        conn,
        lease.Lease(run.id, run.lease_token),
        "FAILED",
        reason=starts.UNSCHEDULABLE,
        error="0/1 nodes are available: 1 Insufficient cpu",
    )
    assert ready(conn, job.id)["status"] == "True"
    assert "Cannot start" not in overview_badge(conn, job.id)


def test_a_refused_launch_published_after_the_refusal_gets_no_run_launched_event(conn):
    job = define(conn, "announced", now=T0, schedule="@yearly")
    run_now(conn, job, "a", Refusing(), 1)
    posted: list[str] = []

    class Events:
        endings = NamespaceEndings()  # none seen going

        def create(self, path, body):
            posted.append(body["reason"])
            return body

        def get(self, path, **params):
            return {"metadata": {"uid": "not this one"}}

    Publisher(Events()).run_once(conn)  # type: ignore[arg-type]
    assert "RunLaunched" not in posted and "RunFailed" in posted, posted
