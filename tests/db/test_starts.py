"""A run is running only once its workload started; until then it is launching, bounded.

The starts service (``pgsched.k8s.jobside.starts``) reads what the API shows of launching runs'
Jobs and pods (a stand-in serving them from dicts, as in test_verdicts) and records it in
the real database: the workload's start, or the pod's reason for waiting; at the bound the
run ends with that reason, not retried by default; a launching run it observes is not
silent for the reaper.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from db.test_verdicts import Api
from factories import RecordingLauncher, define, runs_of
from pgsched.engine import dispatch, lease, reap, runs, settle, starts
from pgsched.engine.launcher import LaunchError
from pgsched.k8s.client import api
from pgsched.k8s.jobside import starts as pod_starts

CATCH_UP = int(pod_starts.CATCH_UP.total_seconds())

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
FAST = {"intervalSeconds": 1, "timeoutSeconds": 3, "orphanTimeoutSeconds": 5}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def claimed(conn, name="job", *, second=0, **spec):
    """A run of a new job ``name``, claimed ``second`` seconds after T0."""
    definition = define(conn, name, now=T0, **spec)
    runs.run_now(conn, definition.id, token="go", scheduled_for=at(second))
    [run] = dispatch.run_once(
        conn, RecordingLauncher(), definition_ids=[definition.id], now=at(second)
    ).claimed
    return definition, lease.Lease(run.id, run.lease_token), f"{name}-{run.id}"


def api_away(conn, kube, seconds, **round_args):
    """The API server unreachable for the rounds at ``seconds`` (each fails), then back."""
    kube.down = True
    for second in seconds:
        with pytest.raises(api.ApiError):
            pod_starts.run_once(conn, kube, now=at(second), **round_args)
    kube.down = False


def ends_nothing(conn, kube, seconds, **round_args):
    """The rounds at ``seconds`` end no run."""
    for second in seconds:
        assert pod_starts.run_once(conn, kube, now=at(second), **round_args).ended == {}


def ends_at(conn, kube, run_id, seconds, last, **round_args):
    """The rounds at ``seconds`` end nothing; the round at ``last`` ends the run
    StartTimeout."""
    ends_nothing(conn, kube, seconds, **round_args)
    ended = pod_starts.run_once(conn, kube, now=at(last), **round_args).ended
    assert ended == {run_id: "StartTimeout"}


def pod_waiting(reason, message="", *, sidecar_running=True):
    """A pod whose heartbeat sidecar runs (it beats) and whose main container waits."""
    init = [{"name": "pgsched-heartbeat", "state": {"running": {}}}] if sidecar_running else []
    return {
        "metadata": {"name": "p-1", "creationTimestamp": "2026-06-01T12:00:00Z"},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": init,
            "containerStatuses": [
                {"name": "main", "state": {"waiting": {"reason": reason, "message": message}}}
            ],
        },
    }


def pod_unschedulable():
    return {
        "metadata": {"name": "p-1", "creationTimestamp": "2026-06-01T12:00:00Z"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 node(s) didn't match selector.",
                }
            ],
        },
    }


def pod_started(started_at="2026-06-01T12:00:07Z"):
    return {
        "metadata": {"name": "p-1", "creationTimestamp": "2026-06-01T12:00:00Z"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "main", "state": {"running": {"startedAt": started_at}}}
            ],
        },
    }


def run_row(conn, run_lease):
    return conn.execute(
        "SELECT status, reason, error, retry_decision FROM pgsched.job_runs WHERE id = %s",
        [run_lease.run_id],
    ).fetchone()


def outbox(conn, run_lease):
    return [
        (row["status"], row["reason"])
        for row in conn.execute(
            "SELECT status, reason FROM pgsched.run_events WHERE run_id = %s ORDER BY id",
            [run_lease.run_id],
        )
    ]


def test_a_run_whose_image_cannot_be_pulled_waits_launching_then_ends_image_pull_failed_unretried(
    conn,
):
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=60, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("ImagePullBackOff", "Back-off pulling")]})
    for second in range(1, 60, 2):  # the sidecar beats all along, the workload never starts
        lease.heartbeat(conn, run_lease, now=at(second))
        result = pod_starts.run_once(conn, kube, now=at(second))
        assert result.waiting == {run_lease.run_id: "ImagePullBackOff"}
        assert reap.run_once(conn, now=at(second), await_verdicts=True).total == 0
    start = starts.of_run(conn, run_lease.run_id)
    assert start is not None and start.launching and start.bound_at == at(60)
    assert start.waiting_message == "pod p-1, container main: Back-off pulling"
    assert run_row(conn, run_lease)["status"] == "RUNNING"

    result = pod_starts.run_once(conn, kube, now=at(60))
    assert result.ended == {run_lease.run_id: "ImagePullFailed"}
    settle.run_once(conn, now=at(61))
    row = run_row(conn, run_lease)
    assert (row["status"], row["reason"]) == ("FAILED", "ImagePullFailed")
    assert "did not start within startTimeoutSeconds (60): ImagePullBackOff" in row["error"]
    assert row["retry_decision"].startswith("not retried"), row["retry_decision"]


def test_an_image_name_that_can_never_be_pulled_ends_the_run_at_once(conn):
    _, run_lease, job_name = claimed(conn)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("InvalidImageName", "bad name")]})
    assert pod_starts.run_once(conn, kube, now=at(2)).ended == {run_lease.run_id: "ImagePullFailed"}
    assert "can never start: InvalidImageName" in run_row(conn, run_lease)["error"]


def test_an_unschedulable_run_is_not_orphaned_while_observed_and_ends_unschedulable(conn):
    """No node takes the pod: no sidecar, no heartbeat. The reaper's orphan timeout (5 s)
    does not call it dead while the starts service observes it launching."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=30, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_unschedulable()]})
    for second in range(1, 30):
        pod_starts.run_once(conn, kube, now=at(second))
        assert reap.run_once(conn, now=at(second), await_verdicts=True).total == 0
    assert pod_starts.run_once(conn, kube, now=at(30)).ended == {run_lease.run_id: "Unschedulable"}
    assert "didn't match selector" in run_row(conn, run_lease)["error"]


def test_a_launching_run_whose_sidecar_stopped_beating_is_silent_though_its_pod_looks_waiting(
    conn,
):
    """The node died while the workload waited to start: the API keeps the pod's last status
    (the main container waiting), which the starts service keeps reading, but the sidecar's
    heartbeats stopped. A run that beat and went quiet is silent whatever its pod looked like
    last: it awaits its verdict after the heartbeat timeout, as a started run would."""
    _, run_lease, job_name = claimed(conn, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("PodInitializing")]})
    lease.heartbeat(conn, run_lease, now=at(1))
    for second in range(1, 4):
        pod_starts.run_once(conn, kube, now=at(second))
        assert reap.run_once(conn, now=at(second), await_verdicts=True).total == 0
    pod_starts.run_once(conn, kube, now=at(4.5))
    reaped = reap.run_once(conn, now=at(4.5), await_verdicts=True)
    assert reaped.run_ids["outcome_pending"] == [run_lease.run_id]
    # Without the verdicts service (a database-only deployment) the reaper ends it itself.
    conn.execute(
        "UPDATE pgsched.job_runs SET outcome_pending_at = NULL WHERE id = %s", [run_lease.run_id]
    )
    assert reap.run_once(conn, now=at(4.6)).run_ids["heartbeat_lost"] == [run_lease.run_id]
    row = run_row(conn, run_lease)
    assert (row["status"], row["reason"]) == ("FAILED", "HeartbeatLost")


def test_a_launching_run_no_longer_observed_is_judged_by_the_reaper_as_before(conn):
    """The API server away: the starts service observes nothing; after the heartbeat
    timeout without an observation the run's silence counts again (awaits its verdict)."""
    _, run_lease, job_name = claimed(conn, heartbeat=FAST)
    pod_starts.run_once(conn, Api({job_name: {}}, {job_name: [pod_unschedulable()]}), now=at(4))
    assert reap.run_once(conn, now=at(6), await_verdicts=True).total == 0
    reaped = reap.run_once(conn, now=at(7.5), await_verdicts=True)
    assert reaped.run_ids["outcome_pending"] == [run_lease.run_id]


def test_the_start_bound_does_not_run_while_the_pod_cannot_be_observed(conn):
    """The API server away for 95 s of the default 300 s start bound: the pod could not be
    created or report its start meanwhile, so that time is not the run's. The round that
    finds the run again moves its bound by the time out of sight (from the last look to
    this one). The moved bound is stored: a round of another replica, or of a restarted
    operator, keeps it (each round here is a fresh call: nothing is remembered in memory).
    The message says how far it moved."""
    _, run_lease, job_name = claimed(conn, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("ContainerCreating")]})
    pod_starts.run_once(conn, kube, now=at(5))
    api_away(conn, kube, range(10, 100, 10))
    assert pod_starts.run_once(conn, kube, now=at(100)).ended == {}
    assert starts.of_run(conn, run_lease.run_id).bound_at == at(300 + 95)
    ends_at(conn, kube, run_lease.run_id, range(110, 395, 10), 395)
    error = run_row(conn, run_lease)["error"]
    assert "did not start within startTimeoutSeconds (300)" in error
    assert "its bound moved 95 s later for time its pod could not be observed" in error


def test_a_pod_status_read_just_after_the_api_servers_return_is_given_time_to_catch_up(conn):
    """The run's bound passed while the API server was away (59 s of 60 seen, then 40 s
    out of sight): the first status read after the return still says PodInitializing,
    though the workload may have started meanwhile. The run gets CATCH_UP from
    that round before its bound is judged; a start reported within it is recorded."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=60, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("PodInitializing")]})
    for second in range(1, 60, 5):
        pod_starts.run_once(conn, kube, now=at(second))
    assert pod_starts.run_once(conn, kube, now=at(96)).ended == {}  # last look at 56: 40 s
    assert starts.of_run(conn, run_lease.run_id).bound_at == at(96 + CATCH_UP)
    assert pod_starts.run_once(conn, kube, now=at(120)).ended == {}
    kube.pods[job_name] = [pod_started("2026-06-01T12:01:30Z")]
    assert pod_starts.run_once(conn, kube, now=at(125)).started == [run_lease.run_id]


def test_even_a_short_api_server_absence_gives_launching_runs_the_catch_up(conn):
    """One failed round (an API server restart of a few seconds): the Job controller lists
    everything again before it creates the pod, which can take a minute. The runs the
    round meant to look at get CATCH_UP from it; the bound is stored with them."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=45, heartbeat=FAST)
    kube = Api({job_name: {}})  # the Job, no pod yet
    for second in range(1, 41, 5):
        pod_starts.run_once(conn, kube, now=at(second))
    api_away(conn, kube, [42])
    assert starts.of_run(conn, run_lease.run_id).bound_at == at(42 + CATCH_UP)
    ends_at(conn, kube, run_lease.run_id, range(44, 42 + CATCH_UP, 5), 42 + CATCH_UP)


def test_a_run_claimed_just_before_an_api_server_absence_gets_the_catch_up_too(conn):
    """Launched at 0 s, never observed: the API server went away at once. The rounds
    that failed gave the catch-up only to runs observed before; this one was first seen at
    28 s (under the 30 s out of sight), with its pod not yet created again, and ended
    StartTimeout at its 45 s bound (cluster chaos seed 1882430614: 8 runs)."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=45, heartbeat=FAST)
    kube = Api({job_name: {}})
    api_away(conn, kube, range(2, 27, 4))
    assert starts.of_run(conn, run_lease.run_id).bound_at == at(26 + CATCH_UP)
    ends_at(conn, kube, run_lease.run_id, range(28, 26 + CATCH_UP, 4), 26 + CATCH_UP)


def launched_after_a_return(conn):
    """The API server away from 2 s to 26 s, as the rounds of one replica saw it (the
    round at 28 s is answered); a run with a 45 s start bound launched at 29 s, its Job
    there and no pod yet. The fake API, the replica's memory, and the run."""
    _, _, first_job = claimed(conn, "before", startTimeoutSeconds=300, heartbeat=FAST)
    recovery = pod_starts.Recovery()
    kube = Api({first_job: {}})
    api_away(conn, kube, range(2, 27, 4), recovery=recovery)
    pod_starts.run_once(conn, kube, now=at(28), recovery=recovery)
    _, run_lease, job_name = claimed(
        conn, "after", second=29, startTimeoutSeconds=45, heartbeat=FAST
    )
    kube.jobs[job_name] = {}
    return kube, recovery, run_lease, job_name


def test_a_run_launched_just_after_the_api_servers_return_gets_the_catch_up_too(conn):
    """The API server away from 2 s to 26 s; a run launched at 29 s, just after its return.
    The Job controller lists everything again before it creates pods, for Jobs created
    after the return too (cluster chaos seeds 2124390831 and 1731164321: pods created 38 s
    and 60 s after such a launch, the runs ended at their 45 s bound). No bound ends before
    CATCH_UP after the return, as this replica saw it; later launches keep their own
    bound."""
    kube, recovery, run_lease, _ = launched_after_a_return(conn)
    back = 28 + CATCH_UP  # the first round answered after the absence, and its catch-up
    ends_at(conn, kube, run_lease.run_id, range(30, back, 4), back, recovery=recovery)
    launched = back + 2
    _, later, later_job = claimed(
        conn, "later", second=launched, startTimeoutSeconds=45, heartbeat=FAST
    )
    kube.jobs[later_job] = {}
    ends_at(
        conn,
        kube,
        later.run_id,
        range(launched + 2, launched + 45, 4),
        launched + 45,
        recovery=recovery,
    )


def test_pods_the_job_controller_creates_a_minute_after_the_return_still_start(conn):
    """Cluster chaos seed 1731164321: runs launched as a 29 s API server outage ended got
    their pods from the Job controller 60 s later, PodInitializing for 3 s more; with a
    60 s catch-up they ended StartTimeout 2 s before they would have started."""
    kube, recovery, run_lease, job_name = launched_after_a_return(conn)
    ends_nothing(conn, kube, range(30, 89, 4), recovery=recovery)  # no pod yet
    kube.pods[job_name] = [pod_waiting("PodInitializing")]
    ends_nothing(conn, kube, (89, 91), recovery=recovery)
    kube.pods[job_name] = [pod_started("2026-06-01T12:01:32Z")]
    started = pod_starts.run_once(conn, kube, now=at(93), recovery=recovery).started
    assert started == [run_lease.run_id]


class Seconds:
    """A monotonic clock that follows the tests' simulated seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_absence_only_the_clients_other_requests_saw_still_gives_the_catch_up(conn):
    """Chaos seed 1731164321, replayed: no run was launching during a 28 s outage, so no
    starts round read anything, and none failed; runs launched 15 s after the return ended
    at their 45 s bound, their pods created 40 s after the launch. The operator's watches
    saw the outage: the client records the return (``api.Reachability``), and no bound
    ends within CATCH_UP of it."""
    seconds = Seconds()
    kube = Api()
    kube.reachability = api.Reachability(monotonic=seconds)
    recovery = pod_starts.Recovery()
    kube.reachability.lost()  # a watch's reconnection refused at 2 s ...
    seconds.now = 30.0
    kube.reachability.answered()  # ... and answered at 30 s
    _, run_lease, job_name = claimed(conn, second=45, startTimeoutSeconds=45, heartbeat=FAST)
    kube.jobs[job_name] = {}  # its Job, no pod yet
    back = 30 + CATCH_UP
    for second in range(46, back, 4):
        seconds.now = float(second)
        assert pod_starts.run_once(conn, kube, now=at(second), recovery=recovery).ended == {}
    seconds.now = float(back)
    ended = pod_starts.run_once(conn, kube, now=at(back), recovery=recovery).ended
    assert ended == {run_lease.run_id: "StartTimeout"}


class SlowReads(Seconds):
    """A monotonic clock for the starts round that jumps ``next_wait`` at the next API
    read: a read that waited that long for the API server."""

    def __init__(self) -> None:
        super().__init__()
        self.next_wait = 0.0

    def read(self) -> None:
        self.now += self.next_wait
        self.next_wait = 0.0


def test_a_round_that_waited_for_the_api_server_judges_nothing_and_gives_the_catch_up(conn):
    """A stopped API server makes a read wait rather than fail. The round that began at
    41 s (start bound 45 s) was answered 25 s later, with the pod as it was before the
    absence; the next round, at 68 s, found the run observed 27 s earlier, under the 30 s
    that counts as out of sight, and used to end it StartTimeout although the Job
    controller had not yet created pods again (seed 959735939 of the cluster chaos). The
    wait is time out of sight: the slow round judges nothing and gives the run CATCH_UP
    from when it was answered; a start reported within it is recorded."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=45, heartbeat=FAST)
    clock = SlowReads()
    kube = Api({job_name: {}}, {job_name: [pod_waiting("ContainerCreating")]}, on_get=clock.read)
    for second in range(1, 40, 5):
        pod_starts.run_once(conn, kube, now=at(second), monotonic=clock)
    clock.next_wait = 25.0
    assert pod_starts.run_once(conn, kube, now=at(41), monotonic=clock).ended == {}
    assert starts.of_run(conn, run_lease.run_id).bound_at == at(41 + 25 + CATCH_UP)
    ends_nothing(conn, kube, range(68, 126, 5), monotonic=clock)
    kube.pods[job_name] = [pod_started("2026-06-01T12:02:00Z")]
    assert pod_starts.run_once(conn, kube, now=at(125), monotonic=clock).started == [
        run_lease.run_id
    ]


def test_a_run_whose_sidecar_saw_its_workload_end_never_times_out_starting(conn):
    """The sidecar noted the workload's end (it ran), while the pod's status in the API is
    still the old PodInitializing (kubelet has not caught up): the run started, whatever
    the status says. It is left to the Job watch and the verdicts, never StartTimeout."""
    _, run_lease, job_name = claimed(conn, startTimeoutSeconds=20, heartbeat=FAST)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("PodInitializing")]})
    for second in range(1, 20, 5):
        pod_starts.run_once(conn, kube, now=at(second))
    assert lease.workload_ended(conn, run_lease, now=at(19))
    ends_nothing(conn, kube, range(21, 60, 5))
    assert run_row(conn, run_lease)["status"] == "RUNNING"


def test_a_job_held_for_admission_waits_its_own_bound_and_its_start_counts_from_admission(conn):
    _, run_lease, job_name = claimed(
        conn, startTimeoutSeconds=20, admissionTimeoutSeconds=100, heartbeat=FAST
    )
    held = {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"suspend": True},
    }
    kube = Api({job_name: held})
    for second in range(1, 90, 3):
        assert pod_starts.run_once(conn, kube, now=at(second)).waiting == {
            run_lease.run_id: "AwaitingAdmission"
        }
        assert reap.run_once(conn, now=at(second), await_verdicts=True).total == 0
    start = starts.of_run(conn, run_lease.run_id)
    assert start.awaiting_admission and start.bound_at == at(100)
    assert "waiting for admission by admission queue team-a" in start.waiting_message

    kube.jobs[job_name] = {"spec": {"suspend": False}}  # admitted at 90 s
    kube.pods[job_name] = [pod_waiting("ContainerCreating")]
    pod_starts.run_once(conn, kube, now=at(90))
    start = starts.of_run(conn, run_lease.run_id)
    assert start.admitted_at == at(90) and start.bound_at == at(110)
    assert pod_starts.run_once(conn, kube, now=at(109)).ended == {}
    assert pod_starts.run_once(conn, kube, now=at(110)).ended == {run_lease.run_id: "StartTimeout"}


def test_a_job_whose_workload_starts_at_once_when_admitted_records_both(conn):
    _, run_lease, job_name = claimed(conn)
    kube = Api({job_name: {"spec": {"suspend": True}}})
    pod_starts.run_once(conn, kube, now=at(5))
    kube.jobs[job_name] = {"spec": {"suspend": False}}
    kube.pods[job_name] = [pod_started("2026-06-01T12:00:09Z")]
    assert pod_starts.run_once(conn, kube, now=at(10)).started == [run_lease.run_id]
    start = starts.of_run(conn, run_lease.run_id)
    assert (start.admitted_at, start.workload_started_at) == (at(10), at(9))


def test_a_job_never_admitted_ends_admission_timeout(conn):
    _, run_lease, job_name = claimed(conn, admissionTimeoutSeconds=50)
    kube = Api({job_name: {"spec": {"suspend": True}}})
    ends_nothing(conn, kube, (1, 25, 49))  # observed all along (a round every few seconds)
    assert pod_starts.run_once(conn, kube, now=at(50)).ended == {
        run_lease.run_id: "AdmissionTimeout"
    }
    assert "admissionTimeoutSeconds (50)" in run_row(conn, run_lease)["error"]


def test_the_start_is_recorded_once_and_waits_worth_telling_are_announced_once(conn):
    _, run_lease, job_name = claimed(conn)
    kube = Api({job_name: {}}, {job_name: [pod_waiting("ContainerCreating")]})
    pod_starts.run_once(conn, kube, now=at(1))  # the ordinary wait of every pod: no Event
    kube.pods[job_name] = [pod_waiting("ErrImagePull")]
    pod_starts.run_once(conn, kube, now=at(2))
    pod_starts.run_once(conn, kube, now=at(3))
    kube.pods[job_name] = [pod_started("2026-06-01T12:00:04Z")]
    assert pod_starts.run_once(conn, kube, now=at(5)).started == [run_lease.run_id]
    assert pod_starts.run_once(conn, kube, now=at(6)).launching == 0
    assert outbox(conn, run_lease) == [
        ("QUEUED", None),
        ("RUNNING", None),
        ("LAUNCHING", "ErrImagePull"),
        ("STARTED", None),
    ]
    start = starts.of_run(conn, run_lease.run_id)
    assert start.workload_started_at == at(4) and not start.launching


def test_observations_are_fenced_on_the_runs_lease(conn):
    _, run_lease, _ = claimed(conn)
    lease.finish(conn, run_lease, "COMPLETED", now=at(1))
    assert starts.observe(conn, run_lease.run_id, run_lease.token, now=at(2)) is None
    assert starts.of_run(conn, run_lease.run_id) is None


def test_a_pod_security_refusal_ends_pod_security_rejected_and_is_not_retried(conn):
    class Refusing:
        def launch(self, run, definition):
            raise LaunchError(
                "violates Pod Security restricted:latest", reason="PodSecurityRejected"
            )

    definition = define(conn, now=T0)
    runs.run_now(conn, definition.id, token="go", scheduled_for=T0)
    dispatch.run_once(conn, Refusing(), definition_ids=[definition.id], now=T0)
    settle.run_once(conn, now=at(1))
    [failed] = runs_of(conn, definition)  # maxAttempts 3, yet no second attempt
    assert (failed["status"], failed["reason"]) == ("FAILED", "PodSecurityRejected")
    assert failed["retry_decision"].startswith("not retried"), failed["retry_decision"]
