"""Who sees what, on the real API server: ServiceAccount tokens, Roles, TokenReview and
SubjectAccessReview. The UI itself runs as a ServiceAccount holding exactly the chart's UI
ClusterRole (create tokenreviews and subjectaccessreviews) plus a Job/pod reader in one
namespace, so these tests also prove that those rules suffice."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from browser import Browser

from conftest import READ_JOBS, Served, Tenants, grant, serve, token_for
from devenv import kubeconfig
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.ui import access, throttle
from plugins.cluster import container, job_manifest

pytestmark = pytest.mark.cluster


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
        assert "not signed in" in page and "signed in with a token" not in page, page[:600]
    status, _ = token_ui.get("/", token="not-a-token")
    assert status == 401


def test_wrong_tokens_from_one_address_do_not_lock_out_others_behind_the_same_address(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    """Everyone behind kubectl port-forward has one address: one visitor's wrong tokens
    are throttled, another's good one signs in (its JWT claims another identity)."""
    found, _ = tenants
    answers = [token_ui.get("/", token=f"guess-{n}")[0] for n in range(throttle.PER_CLIENT + 1)]
    assert answers == [401] * throttle.PER_CLIENT + [429], answers
    status, page = token_ui.get("/", token=found.viewer)
    assert status == 200 and found.alpha in page


def test_a_token_without_access_to_a_namespace_sees_nothing_of_it(
    token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    status, page = token_ui.get("/", token=found.viewer)
    assert "signed in with a token" in page
    assert status == 200
    assert f"/ns/{found.alpha}/report" in page
    assert found.beta not in page and "payroll" not in page
    beta = found.beta_history
    for path in (
        f"/ns/{found.beta}/payroll",
        f"/ns/{found.beta}/payroll/why?at=2026-01-01T09:00",
        f"/ns/{found.beta}/no-such-job",  # 403, not 404: nothing is said about what exists
        f"/?namespace={found.beta}",
    ):
        status, page = token_ui.get(path, token=found.viewer)
        assert status == 403, path
        assert "payroll" not in page.split("<main>")[1] or path.startswith(
            f"/ns/{found.beta}/payroll"
        )
        assert "BackoffLimitExceeded" not in page
    # A run's URL names no namespace: one in beta is "no such run" (test_ui_tenant_abuse.py).
    status, page = token_ui.get(f"/runs/{beta.ids['failed']}", token=found.viewer)
    assert status == 404 and "BackoffLimitExceeded" not in page
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


def test_run_page_shows_the_job_its_pods_and_log_only_to_who_may_read_each(
    cluster: ControlPlane, token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    run_id = found.alpha_history.ids["completed"]
    job = job_manifest(
        "report-c1", container("main", "busybox:1.36", "sh", "-c", "echo report done")
    )
    job["spec"]["template"]["metadata"] = {"labels": {names.LABEL_RUN_ID: str(run_id)}}  # type: ignore[index]
    cluster.api.create(f"/apis/batch/v1/namespaces/{found.alpha}/jobs", job)
    viewer = (found.alpha, "viewer")

    def page() -> str:
        status, body = token_ui.get(f"/runs/{run_id}", token=found.viewer)
        assert status == 200
        return body

    # The viewer may get scheduledjobs, nothing else: the UI reads the Job and its pods with
    # its own rights, so it shows them only when the viewer could read them too.
    hidden = page()
    assert f"Job not shown: you may not get jobs in {found.alpha}" in hidden
    assert "Conditions" not in hidden and "Active / succeeded / failed" not in hidden
    assert 'id="pods"' not in hidden and "terminated" not in hidden

    grant(cluster, found.alpha, "viewer-jobs", READ_JOBS[:1], viewer)
    wait_for(lambda: "Conditions" in page(), 30, describe="the Job shown once get jobs is granted")
    assert f"pods and log not shown: you may not list pods in {found.alpha}" in page()

    grant(cluster, found.alpha, "viewer-pods", READ_JOBS[1:2], viewer)
    wait_for(
        lambda: "Succeeded" in page().partition('id="pods"')[2],
        60,
        describe="the run page showing the Job's pod as Succeeded once list pods is granted",
    )
    shown = page()
    assert "report-c1" in shown and "main: terminated Completed 0" in shown
    # The viewer may not get pods/log, so the UI does not read the log on their behalf.
    assert "Log not shown: you may not get pods/log" in shown

    # Granted, the UI reads the pod's log through the API server (pods/log, served by the
    # real kubelet) and shows the workload's own output on the run page.
    grant(cluster, found.alpha, "viewer-logs", READ_JOBS[2:], viewer)
    wait_for(
        lambda: "report done" in page(),
        60,
        describe="the run page showing the pod's log once pods/log is granted",
    )
    assert "cannot read the log" not in page()


def test_local_ui_sees_what_the_kubeconfig_identity_may_see(
    cluster: ControlPlane, dsn: str, tenants: tuple[Tenants, str], tmp_path: Path
) -> None:
    found, _ = tenants
    path = kubeconfig.write(
        tmp_path / "viewer",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user="viewer",
        token=token_for(cluster, found.alpha, "viewer", audience=None),  # kubectl's kind
    )
    kube = api.KubeApi.from_environment(kubeconfig=str(path))
    for local in serve(dsn, access.KubeconfigAccess(kube)):
        status, page = local.get("/")
        assert status == 200 and f"/ns/{found.alpha}/report" in page and found.beta not in page
        assert local.get(f"/ns/{found.beta}/payroll")[0] == 403
        assert local.get(f"/ns/{found.alpha}/report")[0] == 200
