"""The chart's RBAC, proven against the real API server's authorizer.

The chart's ServiceAccount and rules (``helm template`` of the chart, applied as is) are
asked with SubjectAccessReviews — what ``kubectl auth can-i --as=system:serviceaccount:…``
asks; one test checks kubectl agrees — for every permission the operator uses, and for a
list of things it must never do. A few requests are also made for real with a token of the
ServiceAccount. That these rules are *enough* is proven by
tests/cluster/test_chart_install.py, where the operator runs under them and must not log a
single Forbidden.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devenv import kubeconfig
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.k8s import names
from pgsched.k8s.client import api as operator_api
from pgsched.k8s.jobside import launcher
from pgsched.k8s.serve.operator import StartupError, require_served

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "pgsched"
SJ = "scheduledjobs.pgsched.dev"
POOLS = "concurrencypools.pgsched.dev"
CALENDARS = "calendars.pgsched.dev"
POLICIES = "notificationpolicies.pgsched.dev"

# Every permission the operator uses (see charts/pgsched/templates/rbac.yaml for why).
USED = [
    ("get", SJ, ""),
    ("list", SJ, ""),
    ("watch", SJ, ""),
    ("patch", SJ, ""),
    ("patch", SJ, "status"),
    ("update", SJ, "finalizers"),
    ("get", POOLS, ""),
    ("list", POOLS, ""),
    ("watch", POOLS, ""),
    ("patch", POOLS, ""),
    ("patch", POOLS, "status"),
    ("get", CALENDARS, ""),
    ("list", CALENDARS, ""),
    ("watch", CALENDARS, ""),
    ("patch", CALENDARS, ""),
    ("patch", CALENDARS, "status"),
    ("get", POLICIES, ""),
    ("list", POLICIES, ""),
    ("watch", POLICIES, ""),
    ("patch", POLICIES, ""),
    ("patch", POLICIES, "status"),
    # a Calendar's ics.configMapRef (its own namespace), read by name: never listed or watched
    ("get", "configmaps", ""),
    ("create", "jobs.batch", ""),
    ("get", "jobs.batch", ""),
    ("list", "jobs.batch", ""),
    ("watch", "jobs.batch", ""),
    ("delete", "jobs.batch", ""),
    ("list", "pods", ""),
    ("get", "namespaces", ""),  # its Pod Security labels, after a warning on a Job
    ("create", "events", ""),
    # the per-run lease Secret: the token must not be readable from the Job or the pod.
    # RBAC cannot narrow these to the lease Secrets; the chart's admission policy does
    # (tests/cluster/test_tenant_chart.py).
    ("create", "secrets", ""),
    ("patch", "secrets", ""),
    ("delete", "secrets", ""),
]

# What it must not do, wherever it works.
FORBIDDEN_EVERYWHERE = [
    ("get", "secrets", ""),
    ("list", "secrets", ""),
    ("watch", "secrets", ""),
    ("create", "pods", ""),
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
    ("get", "pods", "log"),
    ("create", SJ, ""),
    ("delete", SJ, ""),
    ("create", POOLS, ""),
    ("delete", POOLS, ""),
    ("update", SJ, ""),
    ("update", SJ, "status"),
    ("patch", "jobs.batch", ""),
    ("update", "jobs.batch", "status"),
    ("list", "configmaps", ""),
    ("watch", "configmaps", ""),
    ("patch", "configmaps", ""),
    ("create", CALENDARS, ""),
    ("delete", CALENDARS, ""),
    ("create", POLICIES, ""),
    ("delete", POLICIES, ""),
    ("create", "deployments.apps", ""),
    ("create", "serviceaccounts", "token"),
    ("create", "roles.rbac.authorization.k8s.io", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", ""),
    ("patch", "events", ""),
]

# Cluster-scoped: never, in either mode (the operator watches only its namespaces' resources; see k8s/serve/operator.py).
FORBIDDEN_CLUSTER_SCOPED = [
    ("list", "namespaces", ""),
    ("watch", "namespaces", ""),
    ("list", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("create", "clusterroles.rbac.authorization.k8s.io", ""),
    ("list", "nodes", ""),
]


@dataclass(frozen=True)
class Installation:
    """The chart's RBAC objects of one release, applied in the shared cluster."""

    release: str
    namespace: str  # the release namespace, home of the ServiceAccount
    watched: str
    other: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.release}-pgsched"


def can_i(
    cluster: ControlPlane,
    who: Installation,
    verb: str,
    resource: str,
    subresource: str,
    namespace: str | None,
) -> bool:
    """The API server's authorizer decision for the ServiceAccount (a SubjectAccessReview:
    what ``kubectl auth can-i --as=<sa>`` asks, without a kubectl process per question)."""
    plural, _, group = resource.partition(".")
    attributes = {"verb": verb, "resource": plural, "group": group, "subresource": subresource}
    if namespace:
        attributes["namespace"] = namespace
    review = cluster.api.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": who.user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{who.namespace}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        },
    )
    return bool(review["status"].get("allowed"))


def kubectl_can_i(cluster: ControlPlane, who: Installation, *args: str) -> str:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={who.user}", check=False)
    return result.stdout.strip()


def rendered_rbac(cluster: ControlPlane, release: str, namespace: str, *sets: str) -> list[dict]:
    args = [arg for item in sets for arg in ("--set", item)]
    output = cluster.helm(
        "template",
        release,
        CHART,
        "-n",
        namespace,
        "--show-only",
        "templates/rbac.yaml",
        "--show-only",
        "templates/serviceaccount.yaml",
        *args,
    ).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def create_namespace(cluster: ControlPlane, name: str) -> None:
    cluster.api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


@pytest.fixture(scope="module")
def spaces(cluster: ControlPlane, crd: None) -> Iterator[tuple[str, str, str]]:
    # The CRD must exist: `kubectl auth can-i` answers "no" for a resource it cannot map.
    suffix = secrets.token_hex(3)
    names_ = (f"rbac-system-{suffix}", f"rbac-jobs-{suffix}", f"rbac-other-{suffix}")
    for name in names_:
        create_namespace(cluster, name)
    yield names_
    for name in names_:
        cluster.api.delete(f"/api/v1/namespaces/{name}")


def apply(cluster: ControlPlane, objects: list[dict]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def namespaced(cluster: ControlPlane, spaces: tuple[str, str, str]) -> Installation:
    system, jobs, other = spaces
    apply(cluster, rendered_rbac(cluster, "ns", system, f"watchNamespaces={{{jobs}}}"))
    return Installation("ns", system, jobs, other)


@pytest.fixture(scope="module")
def cluster_wide(cluster: ControlPlane, spaces: tuple[str, str, str]) -> Iterator[Installation]:
    system, jobs, other = spaces
    release = f"wide{secrets.token_hex(2)}"
    objects = rendered_rbac(cluster, release, system, "rbac.clusterWide=true")
    apply(cluster, objects)
    yield Installation(release, system, jobs, other)
    for obj in objects:
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--wait=false")


def test_namespaced_rules_are_exactly_the_permissions_the_operator_uses(cluster, namespaced):
    watched = f"watchNamespaces={{{namespaced.watched}}}"
    [role] = [
        obj
        for obj in rendered_rbac(cluster, "ns", namespaced.namespace, watched)
        if obj["kind"] == "Role"
    ]
    granted = {
        (verb, f"{resource.split('/')[0]}.{group}".rstrip("."), "/".join(resource.split("/")[1:]))
        for rule in role["rules"]
        if not rule.get("resourceNames")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(USED)
    # Beside them, only `get` of the notification Secrets the chart names (never a Secret
    # by any other name: FORBIDDEN_EVERYWHERE).
    named = [
        (rule["verbs"], rule["resources"], rule["resourceNames"])
        for rule in role["rules"]
        if rule.get("resourceNames")
    ]
    assert named == [(["get"], ["secrets"], ["pgsched-notify"])]


def test_kubectl_auth_can_i_agrees_with_the_reviews(cluster, namespaced):
    watched = ["-n", namespaced.watched]
    assert kubectl_can_i(cluster, namespaced, "create", "jobs.batch", *watched) == "yes"
    assert kubectl_can_i(cluster, namespaced, "patch", SJ, "--subresource=status", *watched) == (
        "yes"
    )
    assert kubectl_can_i(cluster, namespaced, "get", "secrets", *watched) == "no"
    assert kubectl_can_i(cluster, namespaced, "list", SJ, "--all-namespaces") == "no"


@pytest.mark.parametrize(("verb", "resource", "subresource"), USED)
def test_namespaced_operator_may_do_what_it_uses_in_the_watched_namespace(
    cluster, namespaced, verb, resource, subresource
):
    assert can_i(cluster, namespaced, verb, resource, subresource, namespaced.watched)


@pytest.mark.parametrize(("verb", "resource", "subresource"), USED)
def test_namespaced_operator_may_do_nothing_in_other_namespaces(
    cluster, namespaced, verb, resource, subresource
):
    for where in (namespaced.other, namespaced.namespace, None):
        assert not can_i(cluster, namespaced, verb, resource, subresource, where), where


@pytest.mark.parametrize(("verb", "resource", "subresource"), FORBIDDEN_EVERYWHERE)
def test_namespaced_operator_is_denied_what_it_must_not_do(
    cluster, namespaced, verb, resource, subresource
):
    for where in (namespaced.watched, None):
        assert not can_i(cluster, namespaced, verb, resource, subresource, where), where


@pytest.mark.parametrize(("verb", "resource", "subresource"), FORBIDDEN_CLUSTER_SCOPED)
def test_operator_gets_nothing_cluster_scoped_in_either_mode(
    cluster, namespaced, cluster_wide, verb, resource, subresource
):
    for who in (namespaced, cluster_wide):
        assert not can_i(cluster, who, verb, resource, subresource, None), who.release


@pytest.mark.parametrize(("verb", "resource", "subresource"), USED)
def test_cluster_wide_operator_may_do_what_it_uses_in_every_namespace(
    cluster, cluster_wide, verb, resource, subresource
):
    for where in (cluster_wide.watched, cluster_wide.other, None):
        assert can_i(cluster, cluster_wide, verb, resource, subresource, where), where


@pytest.mark.parametrize(("verb", "resource", "subresource"), FORBIDDEN_EVERYWHERE)
def test_cluster_wide_operator_is_still_denied_what_it_must_not_do(
    cluster, cluster_wide, verb, resource, subresource
):
    for where in (cluster_wide.other, None):
        assert not can_i(cluster, cluster_wide, verb, resource, subresource, where), where


# -- real calls as the ServiceAccount ------------------------------------------------------------


@pytest.fixture(scope="module")
def as_operator(
    cluster: ControlPlane, namespaced: Installation, tmp_path_factory: pytest.TempPathFactory
) -> operator_api.KubeApi:
    """The operator's own API client, authenticated as the chart's ServiceAccount."""
    account = namespaced.user.rsplit(":", 1)[1]
    token = wait_for(
        lambda: cluster.kubectl(
            "create", "token", account, "-n", namespaced.namespace, "--duration=1h"
        ).stdout.strip(),
        30,
        describe=f"a token for ServiceAccount {namespaced.namespace}/{account}",
    )
    path = kubeconfig.write(
        tmp_path_factory.mktemp("sa") / "kubeconfig",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user=namespaced.user,
        token=token,
    )
    return operator_api.KubeApi.from_environment(kubeconfig=str(path))


def test_as_the_service_account_the_operator_reads_its_resources_but_not_secrets(
    cluster, namespaced, as_operator, crd
):
    watched = namespaced.watched
    cluster.kubectl("create", "secret", "generic", "db", "-n", watched, "--from-literal=dsn=x")
    sj_path = operator_api.path_of(
        group=names.GROUP, version=names.VERSION, namespace=watched, plural=names.PLURAL
    )
    pods_path = operator_api.path_of(namespace=watched, plural="pods")

    assert as_operator.get(sj_path)["items"] == []
    assert as_operator.get(pods_path)["items"] == []
    # A Role's `get namespaces` reaches its own namespace object, and no other.
    namespace = as_operator.get(operator_api.path_of(plural="namespaces", name=watched))
    assert namespace["metadata"]["name"] == watched
    for method, path, body in [
        ("GET", operator_api.path_of(plural="namespaces", name=namespaced.other), None),
        ("GET", operator_api.path_of(namespace=watched, plural="secrets", name="db"), None),
        ("GET", operator_api.path_of(plural="secrets"), None),
        ("POST", pods_path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}),
        ("GET", operator_api.path_of(namespace=namespaced.other, plural="pods"), None),
    ]:
        with pytest.raises(operator_api.ApiError) as refused:
            as_operator.request(method, path, body=body)
        assert refused.value.status == 403, refused.value


def test_as_the_service_account_the_operator_reads_a_lease_secret_only_by_a_patch_of_nothing(
    namespaced, as_operator, crd
):
    """The launcher adopting the Job of an earlier claim reads that claim's lease Secret
    (k8s/jobside/launcher.py) without `get` on Secrets, never granted: a merge patch that changes
    nothing is not written and answers with the Secret as it is."""
    secrets_path = operator_api.path_of(namespace=namespaced.watched, plural="secrets")
    token = uuid.uuid4()
    created = as_operator.create(
        secrets_path,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "adopted-1-lease", "labels": {names.LABEL_RUN_ID: "1"}},
            "stringData": {names.LEASE_SECRET_KEY: str(token)},
        },
    )
    job = {
        "metadata": {
            "name": "adopted-1",
            "namespace": namespaced.watched,
            "annotations": {names.ANNOTATION_LEASE_SHA256: names.lease_fingerprint(str(token))},
        }
    }
    assert launcher.held_lease(as_operator, job) == token
    read = as_operator.merge_patch(f"{secrets_path}/adopted-1-lease", {})
    assert read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    with pytest.raises(operator_api.ApiError) as refused:
        as_operator.get(f"{secrets_path}/adopted-1-lease")
    assert refused.value.status == 403


def test_the_operators_crd_check_works_with_the_charts_permissions_alone(as_operator, crd):
    # Discovery is open to every authenticated user; no CRD read is granted or needed.
    require_served(as_operator, group=names.GROUP, version=names.VERSION, plural=names.PLURAL)


def test_the_operator_refuses_to_start_while_its_crd_is_not_served(as_operator, crd):
    with pytest.raises(StartupError) as missing_kind:
        require_served(
            as_operator, group=names.GROUP, version=names.VERSION, plural="nosuchjobs", timeout=1
        )
    with pytest.raises(StartupError) as missing_group:
        require_served(
            as_operator, group="nosuch.pgsched.dev", version="v1", plural="jobs", timeout=1
        )
    assert "does not serve nosuchjobs.pgsched.dev/v1alpha1 (waited 1s)" in str(missing_kind.value)
    assert "install the CRD" in str(missing_kind.value)
    assert "does not serve jobs.nosuch.pgsched.dev/v1" in str(missing_group.value)
