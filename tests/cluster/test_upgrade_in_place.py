"""An upgrade in place: a run whose pod the previous release started — its sidecar, of the
previous release's image, heartbeating with a database login of its own — runs to its end
under this release's operator, and is neither reaped nor retried (issue 36, "Upgrade in
place"; docs/install.md).

The previous release is real: its code from ``hack/previous-release``'s commit runs the
first operator and migrates the database it starts on; its image (``make images`` builds
``ghcr.io/pgsched/pgsched:previous`` from that commit) runs the sidecar. Then, as an
upgrade does: that operator stops, this release's ``pgsched migrate`` runs, this release's
operator starts."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import uuid
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

import pytest

from devenv.operators import start_operator
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s import names
from plugins.operator import ENDED, busybox

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
PREVIOUS_IMAGE = "ghcr.io/pgsched/pgsched:previous"
HEARTBEAT = {"intervalSeconds": 1, "timeoutSeconds": 10}


def previous_release(directory: Path) -> Path:
    """The previous release's source tree, from git (hack/previous-release)."""
    commit = next(
        line
        for line in (ROOT / "hack" / "previous-release").read_text().splitlines()
        if line and not line.startswith("#")
    )
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "operator"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    return directory / "operator"


def wait_until(predicate, timeout, what):
    return wait_for(predicate, timeout, describe=lambda: what)


def migrate(dsn: str, python_path: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pgsched.cli.main", "migrate"],
        env={**os.environ, "PGSCHED_DSN": dsn, "PYTHONPATH": python_path},
        check=True,
        capture_output=True,
    )


def test_a_run_started_by_the_previous_release_ends_under_this_one(
    cluster, crd, postgres, namespace, sj, tmp_path
):
    old_code = previous_release(tmp_path / "previous")
    database = f"upgrade_{uuid.uuid4().hex[:8]}"
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    dsn = postgres.dsn(dbname=database)
    migrate(dsn, str(old_code))
    # As the previous release's chart wired its pods: a login in pgsched_job, its DSN in a
    # Secret of the namespace.
    login = f"job_{uuid.uuid4().hex[:10]}"
    with connection.connect(dsn) as conn:
        conn.execute(f"CREATE ROLE {login} LOGIN IN ROLE pgsched_job")
    job_dsn = cluster.in_cluster_dsn(dsn).replace("user=postgres", f"user={login}")
    cluster.kubectl(
        "create", "secret", "generic", "pgsched-job-dsn", "-n", namespace,
        f"--from-literal=dsn={job_dsn}",
    )  # fmt: skip

    old = start_operator(
        cluster,
        dsn=dsn,
        namespaces=namespace,
        log_path=tmp_path / "previous-operator.log",
        PYTHONPATH=str(old_code),
        PGSCHED_IMAGE=PREVIOUS_IMAGE,
        PGSCHED_TICK_INTERVAL_SECONDS="0.2",
    )
    new = None
    try:
        sj.apply(
            "long",
            {"schedule": "0 0 1 1 *", "heartbeat": HEARTBEAT, "jobTemplate": busybox("sleep 45")},
            annotations={names.ANNOTATION_RUN_NOW: "go"},
        )
        with connection.connect(dsn) as conn:

            def the_run():
                return conn.execute("SELECT * FROM pgsched.job_runs").fetchone()

            wait_until(lambda: (the_run() or {}).get("heartbeat_at"), 120, "the old pod's beat")
            pod = cluster.kubectl(
                "get", "pods", "-n", namespace, "-o",
                "jsonpath={.items[0].spec.initContainers[0].image}",
            ).stdout  # fmt: skip
            assert pod == PREVIOUS_IMAGE
            assert old.stop() == 0
            migrate(dsn, f"{ROOT / 'operator'}:{os.environ.get('PYTHONPATH', '')}")
            upgraded_at = datetime.now(UTC)
            new = start_operator(
                cluster,
                dsn=dsn,
                namespaces=namespace,
                log_path=tmp_path / "operator.log",
                PGSCHED_TICK_INTERVAL_SECONDS="0.2",
            )
            wait_until(
                lambda: (the_run() or {}).get("heartbeat_at", upgraded_at) > upgraded_at,
                30,
                "the old pod's beats to go on under the new operator",
            )
            wait_until(
                lambda: the_run()["status"] in ENDED,
                120,
                "the run's end",
            )
            run = the_run()
            assert (run["status"], run["reason"]) == ("COMPLETED", None), run
            assert conn.execute("SELECT count(*) AS n FROM pgsched.job_runs").fetchone()["n"] == 1
    finally:
        old.stop()
        if new is not None:
            new.stop()
        with connection.connect(postgres.dsn()) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_an_sdk_image_with_the_previous_releases_runner_fails_at_once_and_says_why(
    operators, sj, cluster
):
    """Its runner wants the database it is no longer given: the run fails at start, with
    the runner's own words in the run's error, and is not retried (docs/install.md)."""
    operators.start()
    sj.apply(
        "stale-sdk",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": HEARTBEAT,
            "retryPolicy": {"maxAttempts": 3, "backoff": {"initialSeconds": 0}},
            "job": {"kind": "ledger-report", "modules": ["pgsched_examples.ledger_report"]},
            "jobTemplate": {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "job", "image": PREVIOUS_IMAGE}]}}
                }
            },
        },
        annotations={names.ANNOTATION_RUN_NOW: "go"},
    )
    run = sj.wait_first_run_ended("stale-sdk", 90)
    print({key: run[key] for key in ("status", "reason", "exit_code", "error", "retry_hint")})
    assert (run["status"], run["reason"], run["exit_code"]) == ("FAILED", "NonZeroExit", 2)
    assert "PGSCHED_DSN" in run["error"], run["error"]  # the old runner's own words
    wait_for(lambda: sj.runs("stale-sdk")[0]["settled_at"], 30, describe=lambda: "settled")
    assert len(sj.runs("stale-sdk")) == 1  # not retried
