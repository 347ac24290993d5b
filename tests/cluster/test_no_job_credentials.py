"""Job pods hold no database credential (DESIGN I12): not in their environment, not in
their files, not in any Secret pgsched made in their namespace. They beat and end their
runs through the run API (docs/run-api.md), on the real node."""

from __future__ import annotations

import base64
import json

import pytest

from pgsched.k8s import names
from plugins.operator import busybox

pytestmark = pytest.mark.cluster

# What any way of reaching PostgreSQL would show: a DSN's keys, a URL, libpq's variables.
MARKERS = ("dbname=", "postgres://", "postgresql://", "PGSCHED_DSN", "PGPASSWORD", "PGHOST")


def search(database: str) -> str:
    """A workload that fails (exit 3 or 4) if it finds a way to the database in its own
    environment or in the files it can read where Secrets and config are mounted."""
    pattern = "|".join([*MARKERS, database])
    return (
        f"if env | grep -E '{pattern}'; then exit 3; fi; "
        f"if grep -rlE '{pattern}' /etc /var/run /run /tmp /pgsched 2>/dev/null; then exit 4; fi; "
        "exit 0"
    )


def test_job_pods_and_their_namespace_hold_no_database_credential(operators, sj, cluster, dsn):
    database = dsn.rsplit("dbname=", 1)[1].split()[0]
    operators.start()
    sj.apply(
        "nosy",
        {
            "schedule": "0 0 1 1 *",
            "heartbeat": {"intervalSeconds": 1, "timeoutSeconds": 20},
            "jobTemplate": busybox(f"sleep 3; {search(database)}"),
        },
        annotations={names.ANNOTATION_RUN_NOW: "go"},
    )
    run = sj.wait_first_run_ended("nosy", 120)
    # It beat through the run API, and its workload found nothing (exit 0).
    assert (run["status"], run["reason"]) == ("COMPLETED", None), run
    assert run["heartbeat_at"] is not None

    [pod] = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", sj.namespace, "-l", f"job-name={run['k8s_job_name']}", "-o", "json"
        ).stdout
    )["items"]
    spec = pod["spec"]
    lease_secret = names.lease_secret_name(run["k8s_job_name"])
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        env = {item["name"]: item for item in container.get("env", [])}
        assert "PGSCHED_DSN" not in env, container["name"]
        assert env.get("PGSCHED_RUN_API_URL", {"value": "https://"})["value"].startswith("https://")
        secrets = {
            item["valueFrom"]["secretKeyRef"]["name"]
            for item in env.values()
            if "secretKeyRef" in item.get("valueFrom", {})
        }
        assert secrets <= {lease_secret}, (container["name"], secrets)
        assert not any("secretRef" in item for item in container.get("envFrom", []))
    mounted = [volume["name"] for volume in spec.get("volumes", []) if "secret" in volume]
    assert mounted == [], mounted

    # No Secret of the namespace (pgsched's lease Secrets, or any other) reaches the database.
    for secret in json.loads(
        cluster.kubectl("get", "secrets", "-n", sj.namespace, "-o", "json").stdout
    )["items"]:
        for key, value in (secret.get("data") or {}).items():
            text = base64.b64decode(value).decode(errors="replace")
            for marker in (*MARKERS, database):
                assert marker not in text, (secret["metadata"]["name"], key, marker)
