"""The chart's life cycle on a fresh local control plane, with a real database.

The tests of this module share one cluster and one release and run in file order, like an
operator's day: install into a namespace that enforces Pod Security ``restricted``, run
an example, prove that job pods talk to the run API and hold no database session,
upgrade, uninstall. The cluster is the module's own, not the session's: a new user's
cluster has no ScheduledJob CRD yet, so the chart's CRD template (and its keep policy) is
exercised for real.

The database is set up as docs/install.md tells an administrator to: the operator's role
owns the database but may not create roles; ``pgsched_job`` exists, and no one logs in as
a member of it.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devenv import run_api
from devenv.controlplane import ControlPlane
from devenv.postgres import PostgresServer
from devenv.waiting import wait_for
from pgsched.db import connection, migrate
from plugins.cluster import require_binaries

pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pgsched"
RELEASE = "pgsched"
NAMESPACE = "pgsched-e2e"
RUN_API_SECRET = f"{RELEASE}-run-api-tls"
OPERATOR_KINDS = (
    "deployments.apps",
    "replicasets.apps",
    "pods",
    "serviceaccounts",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "services",
    "poddisruptionbudgets.policy",
    "configmaps",
    "secrets",
)


@dataclass(frozen=True)
class Database:
    admin: str  # superuser, for assertions
    operator: str
    operator_user: str


@dataclass
class Setup:
    cp: ControlPlane
    db: Database
    install_output: str = ""
    run_api_url: str = ""

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cp.kubectl(*args, input=input).stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-n", NAMESPACE, "-o", "json"))

    def operator_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
        return list(self.get("pods", "-l", selector)["items"])

    def operator_logs(self) -> str:
        return "\n".join(
            self.cp.pod_logs(NAMESPACE, pod["metadata"]["name"], "operator")
            for pod in self.operator_pods()
        )

    def runs(self, name: str) -> list[dict[str, Any]]:
        with connection.connect(self.db.admin) as conn:
            return conn.execute(
                "SELECT r.* FROM pgsched.job_runs r"
                " JOIN pgsched.job_definitions d ON d.id = r.definition_id"
                " WHERE d.name = %s ORDER BY r.id",
                [name],
            ).fetchall()


def ready(pods: list[dict[str, Any]]) -> bool:
    return bool(pods) and all(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
        for pod in pods
    )


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> Database:
    suffix = uuid.uuid4().hex[:8]
    name, operator_user = f"chart_{suffix}", f"op_{suffix}"
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"CREATE ROLE {operator_user} LOGIN")
        admin.execute(f"CREATE DATABASE {name} OWNER {operator_user}")
        # Normally created by the administrator (the migrations still grant to it); the
        # session's template migration (as a superuser) created it on this server already.
        admin.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgsched_job')"
            " THEN CREATE ROLE pgsched_job NOLOGIN; END IF; END $$"
        )
    return Database(
        admin=postgres.dsn(name),
        operator=postgres.dsn(name, user=operator_user),
        operator_user=operator_user,
    )


@pytest.fixture(scope="module")
def setup(database: Database) -> Iterator[Setup]:
    with ControlPlane(binaries=require_binaries()) as cp:
        cp.add_node("node-1")
        labels = {"pod-security.kubernetes.io/enforce": "restricted"}
        cp.api.create(
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": labels},
            },
        )
        wait_for(
            lambda: cp.api.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
            30,
            describe="the default ServiceAccount",
        )
        yield Setup(cp, database)


@pytest.fixture(scope="module")
def installed(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    setup.run_api_url = run_api.chart_url(setup.cp, release=RELEASE, namespace=NAMESPACE)
    values = {
        # Jobs run beside the operator here, as the administrator allows explicitly (the
        # chart's default refuses it: tests/cluster/test_tenant_chart.py).
        "watchNamespaces": [NAMESPACE],
        "allowReleaseNamespace": True,
        # The operator reaches the host's Postgres through a Service.
        "database": {"dsn": setup.cp.in_cluster_dsn(setup.db.operator)},
        # No DNS here: job pods reach the run API at an IP the certificate names.
        "runApi": {"url": setup.run_api_url},
        "config": {"tickIntervalSeconds": 0.5, "publishIntervalSeconds": 0.2},
    }
    values_file = tmp_path_factory.mktemp("chart") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = setup.cp.helm(
        "install", RELEASE, CHART, "-n", NAMESPACE, "-f", values_file, "--wait", "--timeout=120s"
    )
    setup.install_output = result.stdout
    return setup


def apply(setup: Setup, manifest: dict[str, Any]) -> None:
    setup.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(manifest))


def sleeper(name: str) -> dict[str, Any]:
    """A ScheduledJob that runs now and sleeps, heartbeating once at start and then rarely."""
    hello = yaml.safe_load((ROOT / "examples" / "hello-every-minute.yaml").read_text())
    [main] = hello["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    main["command"] = ["sh", "-c", "sleep 300"]
    hello["metadata"] = {"name": name, "annotations": {"pgsched.dev/run-now": "e2e"}}
    hello["spec"]["heartbeat"] = {"intervalSeconds": 600, "timeoutSeconds": 1800}
    return dict(hello)


# -- install --------------------------------------------------------------------------------------


def test_install_in_a_restricted_namespace_runs_ready_operators_as_the_chart_account(installed):
    pods = wait_for(
        lambda: ready(installed.operator_pods()) and installed.operator_pods(),
        60,
        describe=lambda: installed.kubectl("get", "pods", "-A", "-o", "wide"),
    )

    namespace = json.loads(installed.kubectl("get", "namespace", NAMESPACE, "-o", "json"))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert len(pods) == 2
    assert {pod["spec"]["serviceAccountName"] for pod in pods} == {RELEASE}
    crd = json.loads(installed.kubectl("get", "crd", "scheduledjobs.pgsched.dev", "-o", "json"))
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    with connection.connect(installed.db.admin) as conn:
        assert migrate.current_version(conn) == migrate.latest_version()
        owner = conn.execute(
            "SELECT nspowner::regrole::text AS owner FROM pg_namespace WHERE nspname = 'pgsched'"
        ).fetchone()
    assert owner is not None and owner["owner"] == installed.db.operator_user


def test_each_replica_serves_health_and_metrics_on_its_pod_ip(installed):
    # Pod IPs live inside the node's network namespace: go through the API server's proxy,
    # which dials the pod IP as any client in the cluster would.
    for pod in installed.operator_pods():
        base = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}"
        assert installed.kubectl("get", "--raw", f"{base}:8080/proxy/healthz")
        metrics = installed.kubectl("get", "--raw", f"{base}:9090/proxy/metrics")
        assert "pgsched_ticks_total" in metrics
    service = installed.get("service", f"{RELEASE}-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": "metrics"}
    ]


def test_install_notes_tell_the_user_what_to_do_next(installed):
    notes = installed.install_output
    assert f"It serves ScheduledJobs in: {NAMESPACE}." in notes
    assert "Job pods need no database connection" in notes
    assert installed.run_api_url in notes
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{RELEASE}" in notes
    assert f"kubectl -n {NAMESPACE} get scheduledjobs -w" in notes


def test_the_installed_operator_runs_the_example_and_records_it(installed):
    example = yaml.safe_load((ROOT / "examples" / "hello-every-minute.yaml").read_text())
    apply(installed, example)

    runs = wait_for(
        lambda: [r for r in installed.runs("hello-every-minute") if r["status"] == "COMPLETED"],
        90,
        describe=lambda: f"a completed run; runs: {installed.runs('hello-every-minute')}",
    )

    assert runs[0]["trigger"] == "manual" and runs[0]["k8s_job_name"]

    def table() -> str:
        shown = installed.kubectl("get", "sj", "-n", NAMESPACE)
        return shown if "COMPLETED" in shown else ""

    shown = wait_for(table, 30, describe="kubectl get sj to show COMPLETED")
    assert "hello-every-minute" in shown and "LAST STATUS" in shown
    logs = installed.operator_logs()
    assert "Forbidden" not in logs and " 403" not in logs, logs[-3000:]


def test_the_installed_webhook_refuses_an_invalid_scheduled_job_at_apply(installed):
    """kopf in the operator pods, behind the chart's Service, with the chart's certificate
    and configuration (docs/admission.md). Needs the image of these sources (`make images`):
    an older image serves no webhook, and failurePolicy Ignore then lets the spec in."""
    example = yaml.safe_load((ROOT / "examples" / "hello-every-minute.yaml").read_text())
    example["metadata"] = {"name": "typo"}
    example["spec"]["schedule"] = "61 * * * *"
    refused = installed.cp.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(example), check=False
    )
    assert refused.returncode != 0, "applied: the webhook did not refuse it"
    assert (
        'admission webhook "scheduledjobs.pgsched.pgsched.dev" denied the request:'
        " spec.schedule: minute value 61" in refused.stderr
    )


# -- job pods and the run API -------------------------------------------------------------------


def heartbeating_run(setup: Setup, name: str) -> dict[str, Any]:
    """The run once its sidecar has sent the first heartbeat; the next is 600 s away, so the
    row holds still while a test looks at it."""

    def found() -> list[dict[str, Any]]:
        return [
            run
            for run in setup.runs(name)
            if run["status"] == "RUNNING" and run["heartbeat_at"] is not None
        ]

    return wait_for(found, 60, describe=lambda: f"{name} heartbeating: {setup.runs(name)}")[0]


def test_job_pods_heartbeat_through_the_run_api_and_hold_no_database_session(installed):
    apply(installed, sleeper("sleeper-a"))
    running = heartbeating_run(installed, "sleeper-a")
    job = installed.get("job", running["k8s_job_name"])
    [sidecar] = job["spec"]["template"]["spec"]["initContainers"]
    env = {item["name"]: item for item in sidecar["env"]}
    secret = installed.get("secret", RUN_API_SECRET)

    # The address and the CA the chart made; the lease is the pod's one Secret.
    assert env["PGSCHED_RUN_API_URL"]["value"] == installed.run_api_url
    assert env["PGSCHED_RUN_API_CA"]["value"] == base64.b64decode(secret["data"]["ca.crt"]).decode()
    assert "PGSCHED_DSN" not in env
    assert [item["name"] for item in sidecar["env"] if "valueFrom" in item] == [
        "PGSCHED_LEASE_TOKEN"
    ]
    # Its heartbeat reached the database through an operator, not a session of its own:
    # every session on the database is the operator's role (or this test's superuser).
    with connection.connect(installed.db.admin) as conn:
        users = {
            row["usename"]
            for row in conn.execute(
                "SELECT usename FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()
        }
    assert users <= {installed.db.operator_user, "postgres"}, users


# -- upgrade -------------------------------------------------------------------------------------


def pod_template_hashes(setup: Setup) -> set[str]:
    return {pod["metadata"]["labels"]["pod-template-hash"] for pod in setup.operator_pods()}


def test_helm_upgrade_with_a_changed_value_rolls_the_deployment(installed):
    before_pods = {pod["metadata"]["name"] for pod in installed.operator_pods()}
    [before_hash] = pod_template_hashes(installed)
    upgrade = ("upgrade", RELEASE, CHART, "-n", NAMESPACE, "--reuse-values", "--wait")

    installed.cp.helm(*upgrade, "--timeout=120s")
    assert pod_template_hashes(installed) == {before_hash}  # same values: nothing rolls

    installed.cp.helm(*upgrade, "--set", "config.logLevel=DEBUG", "--timeout=180s")

    def rolled() -> list[dict[str, Any]]:
        pods = installed.operator_pods()
        fresh = {pod["metadata"]["name"] for pod in pods}.isdisjoint(before_pods)
        return pods if fresh and len(pods) == 2 and ready(pods) else []

    pods = wait_for(rolled, 120, describe=lambda: installed.kubectl("get", "pods", "-n", NAMESPACE))
    assert pod_template_hashes(installed) - {before_hash} == pod_template_hashes(installed)
    config = installed.get("configmap", RELEASE)
    assert config["data"]["PGSCHED_LOG_LEVEL"] == "DEBUG"
    assert len(pods) == 2


# -- uninstall -----------------------------------------------------------------------------------


def test_helm_uninstall_removes_the_operator_and_keeps_the_crd(installed):
    installed.cp.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=120s")

    selector = f"app.kubernetes.io/instance={RELEASE}"

    def leftovers() -> str:
        return installed.kubectl(
            "get", ",".join(OPERATOR_KINDS), "-n", NAMESPACE, "-l", selector, "-o", "name"
        ).strip()

    wait_for(
        lambda: leftovers() == "", 120, describe=lambda: f"nothing left; found:\n{leftovers()}"
    )
    cluster_scoped = installed.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", selector, "-o", "name"
    )
    assert cluster_scoped.strip() == ""
    crd = json.loads(installed.kubectl("get", "crd", "scheduledjobs.pgsched.dev", "-o", "json"))
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    kept = installed.get("sj")["items"]
    assert {sj["metadata"]["name"] for sj in kept} >= {"hello-every-minute", "sleeper-a"}
