"""Who sees what, on the real API server: ServiceAccount tokens, Roles, TokenReview and
SubjectAccessReview. The UI itself runs as a ServiceAccount holding exactly the chart's UI
ClusterRole (create tokenreviews and subjectaccessreviews) plus a Job/pod reader in one
namespace, so these tests also prove that those rules suffice."""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from browser import Browser

from conftest import History, Served, seed, serve
from devenv import kubeconfig
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s import api, names
from pgsched.ui import access
from plugins.cluster import container, job_manifest

pytestmark = pytest.mark.cluster

UI_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]
READ_SCHEDULED_JOBS = [
    {"apiGroups": ["pgsched.dev"], "resources": ["scheduledjobs"], "verbs": ["get", "list"]}
]
READ_JOBS = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]


@dataclass(frozen=True)
class Tenants:
    alpha: str
    beta: str
    viewer: str  # may get scheduledjobs in alpha only
    outsider: str  # may get nothing
    alpha_history: History
    beta_history: History


def _apply(cluster: ControlPlane, path: str, body: dict[str, object]) -> None:
    cluster.api.create(path, body)


def _account(cluster: ControlPlane, namespace: str, name: str) -> str:
    _apply(
        cluster,
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    return wait_for(
        lambda: cluster.kubectl(
            "create", "token", name, "-n", namespace, "--duration=1h"
        ).stdout.strip(),
        30,
        describe=f"a token for {namespace}/{name}",
    )


def _grant(
    cluster: ControlPlane,
    namespace: str | None,
    name: str,
    rules: list[dict[str, object]],
    account: tuple[str, str],
) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kind, binding_kind = (
        ("Role", "RoleBinding") if namespace else ("ClusterRole", "ClusterRoleBinding")
    )
    where = f"/namespaces/{namespace}" if namespace else ""
    _apply(
        cluster,
        f"{rbac}{where}/{kind.lower()}s",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "rules": rules,
        },
    )
    _apply(
        cluster,
        f"{rbac}{where}/{binding_kind.lower()}s",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": binding_kind,
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}],
        },
    )


def _namespace(cluster: ControlPlane, name: str) -> None:
    _apply(
        cluster,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
        describe=f"{name}/default",
    )


@pytest.fixture
def tenants(cluster: ControlPlane, conn: connection.Connection) -> Iterator[tuple[Tenants, str]]:
    suffix = secrets.token_hex(3)
    alpha, beta = f"ui-alpha-{suffix}", f"ui-beta-{suffix}"
    for name in (alpha, beta):
        _namespace(cluster, name)
    ui_token = _account(cluster, alpha, "pgsched-ui")
    _grant(cluster, None, f"pgsched-ui-{suffix}", UI_RULES, (alpha, "pgsched-ui"))
    _grant(cluster, alpha, "pgsched-ui-jobs", READ_JOBS, (alpha, "pgsched-ui"))
    viewer = _account(cluster, alpha, "viewer")
    _grant(cluster, alpha, "viewer", READ_SCHEDULED_JOBS, (alpha, "viewer"))
    outsider = _account(cluster, beta, "outsider")
    found = Tenants(
        alpha,
        beta,
        viewer,
        outsider,
        seed(conn, namespace=alpha, name="report"),
        seed(conn, namespace=beta, name="payroll"),
    )
    try:
        yield found, ui_token
    finally:
        for name in (alpha, beta):
            cluster.api.delete(f"/api/v1/namespaces/{name}")
        for kind in ("clusterrolebindings", "clusterroles"):
            cluster.api.delete(f"/apis/rbac.authorization.k8s.io/v1/{kind}/pgsched-ui-{suffix}")


@pytest.fixture
def token_ui(
    cluster: ControlPlane, dsn: str, tenants: tuple[Tenants, str], tmp_path: Path
) -> Iterator[Served]:
    """The UI as the operator serves it, authenticated as its own ServiceAccount."""
    _, ui_token = tenants
    path = kubeconfig.write(
        tmp_path / "kubeconfig",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user="pgsched-ui",
        token=ui_token,
    )
    kube = api.KubeApi.from_environment(kubeconfig=str(path))
    yield from serve(dsn, access.TokenAccess(kube))


def test_without_a_token_there_is_only_the_sign_in_page(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    for path in ("/", f"/ns/{found.alpha}/report", f"/runs/{found.alpha_history.ids['failed']}"):
        status, page = token_ui.get(path)
        assert (
            status == 401
            and "name='token'" in page
            and "report" not in page.split("<main>")[1].split("name='token'")[0].replace("/ns/", "")
        )
    status, _ = token_ui.get("/", token="not-a-token")
    assert status == 401


def test_a_token_without_access_to_a_namespace_sees_nothing_of_it(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    status, page = token_ui.get("/", token=found.viewer)
    assert status == 200
    assert f"/ns/{found.alpha}/report" in page
    assert found.beta not in page and "payroll" not in page
    beta = found.beta_history
    for path in (
        f"/ns/{found.beta}/payroll",
        f"/ns/{found.beta}/payroll/why?at=2026-01-01T09:00",
        f"/ns/{found.beta}/no-such-job",  # 403, not 404: nothing is said about what exists
        f"/runs/{beta.ids['failed']}",
        f"/?namespace={found.beta}",
    ):
        status, page = token_ui.get(path, token=found.viewer)
        assert status == 403, path
        assert "payroll" not in page.split("<main>")[1] or path.startswith(
            f"/ns/{found.beta}/payroll"
        )
        assert "BackoffLimitExceeded" not in page
    status, page = token_ui.get("/", token=found.outsider)
    assert status == 200 and found.alpha not in page and found.beta not in page
    status, _ = token_ui.get(f"/ns/{found.alpha}/report", token=found.outsider)
    assert status == 403


def test_a_token_with_access_sees_its_namespace(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    history = found.alpha_history
    status, page = token_ui.get(f"/ns/{found.alpha}/report", token=found.viewer)
    assert status == 200 and "DeadlineMissed" in page
    status, page = token_ui.get(f"/runs/{history.ids['retry']}", token=found.viewer)
    assert status == 200 and "Retry chain" in page
    # The viewer may not read pod logs: the UI asks for them on the viewer's behalf only.
    assert "Kubernetes Job" in page


def test_sign_in_form_in_a_browser_then_only_allowed_namespaces(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    browser = Browser()
    try:
        browser.open(token_ui.url + "/")
        assert "Sign in" in browser.text("main")
        browser.submit("input[name=token]", found.viewer)
        overview = browser.text("main")
        assert "report" in overview and "payroll" not in overview and found.beta not in overview
        browser.open(token_ui.url + f"/ns/{found.beta}/payroll")
        assert "you may not get scheduledjobs" in browser.text("#error")
        browser.open(token_ui.url + "/?" + urllib.parse.urlencode({"namespace": found.alpha}))
        assert "report" in browser.text("#overview")
    finally:
        browser.close()


def test_run_page_shows_the_kubernetes_job_and_its_pod(
    cluster: ControlPlane,
    token_ui: Served,
    tenants: tuple[Tenants, str],
    conn: connection.Connection,
    tmp_path: Path,
) -> None:
    found, _ = tenants
    run_id = found.alpha_history.ids["completed"]
    job = job_manifest(
        "report-c1", container("main", "busybox:1.36", "sh", "-c", "echo report done")
    )
    job["spec"]["template"]["metadata"] = {"labels": {names.LABEL_RUN_ID: str(run_id)}}  # type: ignore[index]
    cluster.api.create(f"/apis/batch/v1/namespaces/{found.alpha}/jobs", job)

    def pod_done() -> bool:
        status, page = token_ui.get(f"/runs/{run_id}", token=found.viewer)
        return status == 200 and "Succeeded" in page.split('id="pods"')[-1]

    wait_for(pod_done, 60, describe="the run page showing the Job's pod as Succeeded")
    _, page = token_ui.get(f"/runs/{run_id}", token=found.viewer)
    assert "report-c1" in page and "main: terminated Completed 0" in page
    # The viewer may not get pods/log, so the UI does not read the log on their behalf.
    assert "you may not get pods/log" in page
    _grant(cluster, found.alpha, "viewer-logs", READ_JOBS[2:], (found.alpha, "viewer"))

    # Granted, the UI reads the pod's log through the API server (pods/log, served by the
    # real kubelet) and shows the workload's own output on the run page.
    def log_shown() -> bool:
        return "report done" in token_ui.get(f"/runs/{run_id}", token=found.viewer)[1]

    wait_for(log_shown, 60, describe="the run page showing the pod's log once pods/log is granted")
    _, page = token_ui.get(f"/runs/{run_id}", token=found.viewer)
    assert "cannot read the log" not in page


def test_local_ui_sees_what_the_kubeconfig_identity_may_see(
    cluster: ControlPlane, dsn: str, tenants: tuple[Tenants, str], tmp_path: Path
) -> None:
    found, _ = tenants
    path = kubeconfig.write(
        tmp_path / "viewer",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user="viewer",
        token=found.viewer,
    )
    kube = api.KubeApi.from_environment(kubeconfig=str(path))
    for local in serve(dsn, access.KubeconfigAccess(kube)):
        status, page = local.get("/")
        assert status == 200 and f"/ns/{found.alpha}/report" in page and found.beta not in page
        assert local.get(f"/ns/{found.beta}/payroll")[0] == 403
        assert local.get(f"/ns/{found.alpha}/report")[0] == 200
