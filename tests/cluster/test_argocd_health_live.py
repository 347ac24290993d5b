"""The Argo CD health checks (deploy/argocd/*.lua), run in real Lua on the statuses a real
operator wrote on the local control plane: the objects are read back from the API server
as Argo CD reads them."""

from __future__ import annotations

import json

import pytest

from argocd_health import Health, health
from cli_runner import pgsched
from devenv.waiting import wait_for
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

NEVER = "0 0 1 1 *"
ONE_ATTEMPT = {"maxAttempts": 1}


def test_health_of_scheduledjobs_and_a_pool_as_the_operator_reports_them(
    operators, sj, cluster, namespace
):
    # Applied before any operator runs: no status yet.
    sj.apply("quiet", {"schedule": NEVER, "jobTemplate": busybox("true")})
    assert health("scheduledjob", sj.get("quiet")).status == "Progressing"

    operators.start(PGSCHED_GAUGE_INTERVAL_SECONDS="1")
    sj.apply("badcron", {"schedule": "61 * * * *", "jobTemplate": busybox("true")})
    sj.apply("paused", {"schedule": NEVER, "suspend": True, "jobTemplate": busybox("true")})
    sj.apply(
        "fragile",
        {"schedule": NEVER, "failureSuspendThreshold": 1, "retryPolicy": ONE_ATTEMPT,
         "jobTemplate": busybox("exit 1")},
    )  # fmt: skip
    sj.apply(
        "failing", {"schedule": NEVER, "retryPolicy": ONE_ATTEMPT, "jobTemplate": busybox("exit 1")}
    )
    sj.apply("pooled", {"schedule": NEVER, "pool": "absent", "jobTemplate": busybox("true")})
    cluster.kubectl(
        "apply", "-f", "-",
        input=json.dumps({
            "apiVersion": "pgsched.dev/v1alpha1", "kind": "ConcurrencyPool",
            "metadata": {"name": "warehouse", "namespace": namespace}, "spec": {"limit": 1},
        }),
    )  # fmt: skip
    for name in ("fragile", "failing"):
        # --database: queued at once, as the status checks below need (docs/cli.md).
        queued = pgsched("run-now", name, "-n", namespace, "--database", dsn=operators.dsn)
        assert queued.code == 0, queued.err

    def settles(name: str, expected: str, message: str = "") -> Health:
        """Health ``expected`` with a message starting ``message``: the status the operator
        publishes after the database's change, not an earlier one that says the same."""
        return wait_for(
            lambda: (
                (found := health("scheduledjob", sj.get(name))).status == expected
                and found.message.startswith(message)
                and found
            ),
            120,
            describe=lambda: (
                f"{name} to be {expected}: {health('scheduledjob', sj.get(name))};"
                f" runs {[(r['status'], r['reason']) for r in sj.runs(name)]}"
            ),
        )

    # Valid and never run: Healthy, whatever its schedule (argocd app wait never waits on it).
    quiet = settles("quiet", "Healthy")
    assert quiet.message.startswith("Scheduled; no run yet; next run at ")
    bad = settles("badcron", "Degraded")
    assert "spec.schedule" in bad.message and "61" in bad.message
    assert settles("paused", "Suspended").message == "spec.suspend is true"
    fragile = settles("fragile", "Degraded")
    assert fragile.message.startswith("Suspended automatically: 1 consecutive run failed")
    [failed] = sj.wait_runs("failing", lambda runs: runs and runs[0]["status"] == "FAILED", 120)
    settles("failing", "Healthy", f"Last run {failed['id']} failed (NonZeroExit)")
    assert "ConcurrencyPool absent does not exist" in settles("pooled", "Degraded").message

    def pool() -> dict:
        out = cluster.kubectl("get", "concurrencypools", "warehouse", "-n", namespace, "-o", "json")
        return dict(json.loads(out.stdout))

    reported = wait_for(
        lambda: (found := health("concurrencypool", pool())).status == "Healthy" and found,
        60,
        describe=lambda: f"the pool's status to be reported: {pool().get('status')}",
    )
    assert reported.message == "0 of 1 running, 0 queued, 0 ScheduledJobs"
