"""Chaos, cluster variant with asynchronous failovers: nothing runs twice, nothing is lost.

Three real ``pgsched operator`` processes, real Jobs and pods on the local node, over a
primary and a real streaming standby (``chaos.replicated``). Every half minute or so the
standby's WAL receiver is frozen, and stays frozen until a Job created since has its
workload running (at least 1.5 s); then the primary is killed and the standby promoted.
The commits of that window — claims, launches, ends, whole runs, run-now requests — are
lost on purpose, as an asynchronous failover under load loses them, and each failover
loses at least one launch whose workload runs. Operators and pods follow the primary
through a multi-host DSN.

The database cannot testify to what it forgot, so the checks read the Kubernetes side
(``chaos.jobside``): which Jobs' workloads started (busybox ``sleep``, which never reads
the cancel file, so a second execution could not be stopped), which Jobs exist, which
requests the operator acknowledged. Required: no workload started twice for one run or one
occurrence, no Job whose run is missing, no acknowledged request without its run, every
succeeded Job's run COMPLETED, every run terminal — and every other invariant.

The second test plants the loss of what the guarantees rest on: no lease is genuine, so
nothing lost is taken back from the Jobs. The same checks must then find a workload
started twice. docs/chaos.md and docs/operations.md have the numbers.
"""

from __future__ import annotations

import pytest

from chaos.clusterchaos import ClusterChaos
from chaos.config import ChaosConfig, chaos_seconds
from chaos.replicated import ReplicatedPostgres

CI_SECONDS = 90.0
LONG_SECONDS = 600.0

pytestmark = [
    pytest.mark.cluster,
    # Alone on the cluster: it restarts the API server, and its deadlines judge timings.
    pytest.mark.exclusive,
    pytest.mark.slow,
    pytest.mark.timeout(chaos_seconds(CI_SECONDS) + 900),
]


def failover_chaos(
    cluster,
    namespace,
    chaos_postgres,
    tmp_path,
    *,
    seconds: float,
    planted: str | None = None,
):
    pair = ReplicatedPostgres(chaos_postgres, synchronous=False, lag_seconds=1.5)
    try:
        config = ChaosConfig(
            "cluster",
            seconds=seconds,
            fault_kinds=("failover",),
            fault_gap=(25.0, 45.0),
            min_faults=5 if seconds >= LONG_SECONDS else 2,
            drain_timeout=300,
            planted=planted,
        )
        chaos = ClusterChaos(
            config,
            pair,
            tmp_path,
            cluster=cluster,
            namespace=namespace,
        )
        return chaos.run()
    finally:
        pair.cleanup()


def test_asynchronous_failovers_lose_no_run_outcome_or_request_and_run_nothing_twice(
    cluster, crd, namespace, chaos_postgres, tmp_path
):
    seconds = chaos_seconds(CI_SECONDS)
    report = failover_chaos(cluster, namespace, chaos_postgres, tmp_path, seconds=seconds)

    assert report.faults.get("failover", 0) >= (5 if seconds >= LONG_SECONDS else 2), (
        report.summary()
    )
    assert report.drained, report.summary()
    assert report.ok, report.summary()
    assert report.runs["completed"] >= report.chaos_seconds / 4, report.summary()


def test_with_no_lease_genuine_the_job_side_shows_the_duplicate_executions(
    cluster, crd, namespace, chaos_postgres, tmp_path
):
    """The negative control: the same chaos (CI length) with nothing taken back from the
    Jobs. Each failover loses a launch whose workload runs, so the checker must find a
    workload started twice: by two Jobs of one run (a lost claim's Job replaced), or by two
    runs of one occurrence (a lost run queued again)."""
    report = failover_chaos(
        cluster, namespace, chaos_postgres, tmp_path, seconds=CI_SECONDS, planted="no-adoption"
    )

    assert report.faults.get("failover", 0) >= 2, report.summary()
    duplicates = [
        item
        for item in report.violations["I1"]
        if "its workload was started by" in item or "was executed by" in item
    ]
    assert duplicates, report.summary()
