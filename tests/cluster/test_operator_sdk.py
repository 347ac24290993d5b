"""SDK job kinds on the cluster: the operator runs `pgsched run` in the job's own image."""

from __future__ import annotations

import pytest

from devenv.waiting import wait_for

pytestmark = pytest.mark.cluster


def sdk_template(examples_dsn: str) -> dict:
    # The pgsched image keeps the SDK examples in /opt/pgsched/examples (see the Dockerfile);
    # a real deployment would use an image of its own with the job modules installed.
    return {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "job",
                            "image": "ghcr.io/pgsched/pgsched:dev",
                            "env": [
                                {"name": "PYTHONPATH", "value": "/opt/pgsched/examples"},
                                {"name": "PGSCHED_EXAMPLES_DSN", "value": examples_dsn},
                            ],
                        }
                    ]
                }
            }
        }
    }


def test_an_sdk_import_is_cancelled_at_a_checkpoint_and_compensated(operators, sj, dsn, cluster):
    operators.start()
    sj.apply(
        "import",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 10},
            "job": {
                "kind": "ledger-import",
                "modules": ["pgsched_examples.ledger_import"],
                "args": {
                    "source": "cluster",
                    "total": 2000,
                    "batch_size": 50,
                    "pause_seconds": 0.3,
                },
            },
            "jobTemplate": sdk_template(cluster.in_cluster_dsn(dsn)),
        },
    )
    sj.annotate("import", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "import", lambda runs: runs and runs[0]["heartbeat_at"], 60, "the runner's heartbeat"
    )
    wait_for(
        lambda: (
            sj.conn.execute(
                "SELECT count(*) AS n FROM pgsched_examples.import_batches WHERE run_id = %s",
                [run["id"]],
            ).fetchone()["n"]
            >= 2
        ),
        30,
        describe="a few imported batches",
    )
    sj.annotate("import", "pgsched.dev/cancel", str(run["id"]))
    [done] = sj.wait_runs(
        "import", lambda runs: runs[0]["status"] == "CANCELLED", 30, "the cancellation"
    )
    assert done["reason"] == "Cancelled"
    entries = sj.conn.execute(
        "SELECT count(*) AS n FROM pgsched_examples.ledger_entries WHERE run_id = %s", [run["id"]]
    ).fetchone()["n"]
    statuses = {
        row["status"]
        for row in sj.conn.execute(
            "SELECT status FROM pgsched_examples.import_batches WHERE run_id = %s", [run["id"]]
        )
    }
    assert entries == 0 and statuses == {"compensated"}


def test_an_sdk_exception_on_the_deny_list_is_not_retried_and_an_unknown_kind_fails_fast(
    operators, sj, dsn, cluster
):
    operators.start()
    sj.apply(
        "unknown",
        {
            "schedule": "0 0 1 1 *",
            "retryPolicy": {"retryOn": ["*"]},
            "job": {"kind": "no-such-kind", "modules": ["pgsched_examples.ledger_report"]},
            "jobTemplate": sdk_template(cluster.in_cluster_dsn(dsn)),
        },
    )
    sj.annotate("unknown", "pgsched.dev/run-now", "go")
    [run] = sj.wait_runs(
        "unknown", lambda runs: runs and runs[0]["status"] == "FAILED", 60, "the failure"
    )
    assert run["reason"] == "UnknownJobKind"
    assert "no-such-kind" in run["error"] and "ledger-report" in run["error"]
    wait_for(lambda: sj.runs("unknown")[0]["settled_at"], 10, describe="settling")
    assert len(sj.runs("unknown")) == 1, "retry_hint=never must win over retryOn: ['*']"
