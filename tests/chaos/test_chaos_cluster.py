"""Chaos, cluster variant: three operator replicas keep I1-I5 on a real control plane.

Real ``pgsched operator`` processes, real Jobs and pods (busybox ``sleep`` next to the
heartbeat sidecar, real containers on the local node), run-now annotations, for
``PGSCHED_CHAOS_MINUTES`` (CI: 100 s) while the driver kills and pauses replicas, kills and
freezes pods, terminates sessions, restarts and crashes Postgres, restarts the API
server and stops it for outages while Jobs run (CI: 15-30 s; runs of 10 minutes or more:
1-5 minutes), and kills or freezes every operator replica at once for 12-20 s, longer
than the heartbeat timeout (``replicas_down``, ``replicas_pause``) while the pods of three
long ScheduledJobs (50 s workloads) beat through it. Then the ScheduledJobs are suspended,
everything drains and the database and the cluster are checked. See docs/chaos.md.

The second test is the self-test of the check that no run is reaped for the operator's
absence (``REAPED_ONLY_IF_HURT``): the same absences, with the reaper made blind to the run
API's presence from the test side, and the check must report the runs it reaped.
"""

from __future__ import annotations

import pytest

from chaos.clusterchaos import REAPED_ONLY_IF_HURT, ClusterChaos
from chaos.config import ChaosConfig, chaos_seconds

# Long enough to inject every kind once, the 15-30 s API outage included.
CI_SECONDS = 100.0
LONG_SECONDS = 600.0

pytestmark = [
    pytest.mark.cluster,
    # Alone on the cluster: it restarts the API server, and its deadlines judge timings.
    pytest.mark.exclusive,
    pytest.mark.slow,
    # (an API server outage that starts near the end runs its course: up to 5 minutes more)
    pytest.mark.timeout(chaos_seconds(CI_SECONDS) + 1200),
]

FAULT_KINDS = {
    "leader_kill",
    "leader_pause",
    "session_kill",
    "pg_restart",
    "pg_crash",
    "job_kill",
    "job_pause",
    "apiserver_restart",
    "apiserver_outage",
    "replicas_down",
    "replicas_pause",
}
# ScheduledJobs of 50 s workloads, for pods to beat through the replicas' absences.
LONG_JOBS = 3


def test_three_operators_keep_every_invariant_while_faults_are_injected(
    cluster, crd, namespace, chaos_postgres, tmp_path
):
    seconds = chaos_seconds(CI_SECONDS)
    long = seconds >= LONG_SECONDS
    config = ChaosConfig(
        "cluster",
        seconds=seconds,
        fault_gap=(2.0, 5.0),
        drain_timeout=300,
        api_outage_seconds=(60.0, 300.0) if long else (15.0, 30.0),
        # Each kind at least once, or the run goes on (up to its length again) and then
        # fails: the check that no run is reaped for the operator's absence needs
        # replicas_down and replicas_pause.
        required_faults=tuple(sorted(FAULT_KINDS)),
    )
    # After an outage of minutes the 2-core node starts the backlog's pods at once and
    # some take minutes to start: the product's default start bound (300 s) lets them, a
    # 45 s bound fails them (seed 1164224170: 82 runs StartTimeout). CI's short outages
    # leave no such backlog, and the short bound there exercises start timeouts.
    chaos = ClusterChaos(
        config,
        chaos_postgres,
        tmp_path,
        cluster=cluster,
        namespace=namespace,
        start_timeout_seconds=None if long else 45,
        long_jobs=LONG_JOBS,
    )

    report = chaos.run()

    assert report.drained, report.summary()
    assert report.ok, report.summary()
    assert set(report.faults) == FAULT_KINDS, "every kind of fault must have been injected"
    assert report.runs["completed"] >= report.chaos_seconds / 4, report.summary()
    # The API server's absence is not the job's failure: a launch it interrupts waits
    # QUEUED (the templates here are all valid, so no launch may fail), and after a long
    # outage the backlog's pods start within the default start bound.
    failed = report.runs["by_reason"]
    assert failed.get("FAILED/LaunchFailed", 0) == 0, report.summary()
    if long:
        assert failed.get("FAILED/StartTimeout", 0) == 0, report.summary()
    # The Job watch saw the Jobs (a relist after an API restart may miss one that came and
    # went meanwhile; most must be there, or the one-Job-per-run check proves nothing).
    assert report.launches >= 0.8 * report.runs["completed"], report.summary()


def test_a_reaper_blind_to_the_operators_absence_is_caught(
    cluster, crd, namespace, chaos_postgres, tmp_path
):
    """The self-test of ``REAPED_ONLY_IF_HURT``: ``pgsched.silent_since`` replaced, from the
    test, by one that counts silence from the last beat whatever the run API's presence
    (``presence-blind-reaper``), and every replica frozen for longer than the heartbeat
    timeout while long jobs' pods beat (``replicas_pause``). When the replicas wake, their
    endpoints are back only seconds later: the shipped rule gives the pods their timeout
    from the API's return, the blind one judges them at once. The check must name the runs
    it reaped, with the absence in their silence.

    Not ``replicas_down``: restarted replicas wait 30 s before their verdicts confirm any
    silence (``verdicts.STALE_VIEW_SECONDS``) and the pods beat again well within that, so
    a blind reaper's runs are saved there (seen: the runs it marked were all cleared by
    their next beat)."""
    config = ChaosConfig(
        "cluster",
        seconds=40,
        fault_kinds=("replicas_pause",),
        required_faults=("replicas_pause",),
        fault_gap=(3.0, 5.0),
        drain_timeout=300,
        planted="presence-blind-reaper",
    )
    chaos = ClusterChaos(
        config,
        chaos_postgres,
        tmp_path,
        cluster=cluster,
        namespace=namespace,
        requests_per_second=1.0,
        long_jobs=LONG_JOBS,
        # The blind reaper must judge before the pods beat again: on a loaded machine a
        # wake's first reap came after endpoints back within 1.5 s, and the pods' next
        # beat cleared every run it had marked (the check then found nothing to name).
        endpoints_back_after=(4.0, 5.0),
    )

    report = chaos.run()

    assert report.faults.get("replicas_pause", 0) >= 1, report.summary()
    found = report.violations[REAPED_ONLY_IF_HURT]
    assert found, report.summary()
    assert all("no replica was there" in item for item in found), report.summary()
