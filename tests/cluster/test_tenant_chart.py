"""A ScheduledJob author against the chart: what a tenant can make a job pod run as.

Whoever may create ScheduledJobs in a namespace may make pods there; the chart's defaults
must keep those pods away from the operator (its namespace, its ServiceAccount, its
database Secret) and from other runs' lease Secrets, and let an administrator narrow the
ServiceAccounts and Secrets further (docs/security-chart.md). Proven against the real API
server, with RBAC and the chart's ValidatingAdmissionPolicies on:

- ``helm install`` with the security defaults, and a tenant's ``kubectl apply`` refused;
- the operator alone (a namespace no policy binding selects), refusing before launch with a
  precise condition while the tenant's other ScheduledJobs keep running;
- the operator's own ServiceAccount unable to write a Secret that is not a lease Secret.

The release's operator pods are not started (``replicaCount: 0``): the pods would run the
image built from main's sources, and the operator under test runs here as a process
(``operators``), from this checkout.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devenv.adminclient import ApiError as AdminApiError
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from factories import RecordingLauncher, define, no_database
from k8sfixtures import definition as fixture_definition
from k8sfixtures import job_settings
from k8sfixtures import run as fixture_run
from pgsched.engine import dispatch, runs
from pgsched.engine.launcher import LaunchError
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.k8s.jobside import jobpolicy, jobs, launcher
from plugins.cluster import client_as
from plugins.operator import busybox

# Alone on the cluster: the chart's admission policies are cluster-wide.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

CHART = Path(__file__).resolve().parents[2] / "charts" / "pgsched"
POD = "spec.jobTemplate.spec.template.spec"


@dataclass(frozen=True)
class Release:
    name: str
    home: str  # the release namespace: the operator's ServiceAccount and database Secret
    jobs: str  # the watched namespace

    @property
    def account(self) -> str:
        return f"{self.name}-pgsched"

    @property
    def database_secret(self) -> str:
        return f"{self.name}-pgsched-database"


def create_namespace(cluster: ControlPlane, name: str) -> None:
    cluster.api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        describe=f"ServiceAccount {name}/default",
    )


@pytest.fixture(scope="module")
def release(
    cluster: ControlPlane, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    suffix = secrets.token_hex(3)
    found = Release(name=f"tenant{suffix}", home=f"tenant-home-{suffix}", jobs=f"tenant-{suffix}")
    for namespace in (found.home, found.jobs):
        create_namespace(cluster, namespace)
    values = {
        # The security-relevant values are the defaults; these only say where, and keep the
        # operator pods (main's image) from starting.
        "watchNamespaces": [found.jobs],
        "database": {"dsn": "host=db.invalid user=pgsched dbname=pgsched"},
        "crds": {"install": False},
        "replicaCount": 0,
        "podDisruptionBudget": {"enabled": False},
    }
    values_file = tmp_path_factory.mktemp("tenant") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    cluster.helm("install", found.name, CHART, "-n", found.home, "-f", values_file)
    # The API server's policy cache picks a new binding up within a second or so; each probe
    # is a new object (an accepted one is not checked again while its spec stays the same).
    wait_for(
        lambda: refused_apply(
            cluster, found.home, f"probe-{secrets.token_hex(3)}", busybox("true")
        ),
        30,
        describe="the job-template admission policy to be in force",
    )
    yield found
    cluster.helm("uninstall", found.name, "-n", found.home, "--wait", check=False)
    for namespace in (found.home, found.jobs):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def manifest(namespace: str, name: str, template: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": f"{names.GROUP}/{names.VERSION}",
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": template},
        }
    )


def refused_apply(
    cluster: ControlPlane, namespace: str, name: str, template: dict[str, Any]
) -> str | None:
    """The API server's refusal of ``kubectl apply``, or None if it was accepted."""
    result = cluster.kubectl(
        "apply", "-f", "-", input=manifest(namespace, name, template), check=False
    )
    return result.stderr if result.returncode else None


def secret_env(secret: str) -> dict[str, Any]:
    return {"name": "X", "valueFrom": {"secretKeyRef": {"name": secret, "key": "dsn"}}}


# Every place a jobTemplate can name a Secret that the admission policy looks at.
def naming(secret: str) -> dict[str, dict[str, Any]]:
    main = {"name": "main", "image": "busybox:1.36"}
    return {
        "env": {"containers": [{**main, "env": [secret_env(secret)]}]},
        "envFrom": {"containers": [{**main, "envFrom": [{"secretRef": {"name": secret}}]}]},
        "initContainers env": {
            "containers": [main],
            "initContainers": [{**main, "name": "init", "env": [secret_env(secret)]}],
        },
        "volume": {
            "containers": [main],
            "volumes": [{"name": "s", "secret": {"secretName": secret}}],
        },
        "projected volume": {
            "containers": [main],
            "volumes": [{"name": "s", "projected": {"sources": [{"secret": {"name": secret}}]}}],
        },
        "imagePullSecrets": {"containers": [main], "imagePullSecrets": [{"name": secret}]},
    }


PLACES = list(naming("x"))


def template(**pod_spec: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": pod_spec}}}


# -- kubectl apply, with the chart's admission policy --------------------------------------------


def test_the_default_install_refuses_any_scheduledjob_in_the_release_namespace(cluster, release):
    refusal = refused_apply(cluster, release.home, "beside-operator", busybox("true"))
    assert refusal is not None
    assert f"metadata.namespace: {release.home} is the namespace of the pgsched operator" in refusal
    as_operator = busybox("true", serviceAccountName=release.account)
    assert refused_apply(cluster, release.home, "as-operator", as_operator) is not None
    for name in ("beside-operator", "as-operator"):
        assert cluster.kubectl("get", "sj", name, "-n", release.home, check=False).returncode


@pytest.mark.parametrize("place", PLACES)
def test_no_scheduledjob_may_name_a_lease_secret_in_a_watched_namespace(cluster, release, place):
    spec = naming("victim-42-lease")[place]
    refusal = refused_apply(cluster, release.jobs, "lease-thief", template(**spec))
    assert refusal is not None
    assert "never a per-run lease Secret (*-lease)" in refusal
    assert f"names a Secret not allowed in namespace {release.jobs}" in refusal


def test_a_plain_scheduledjob_in_the_watched_namespace_is_accepted(cluster, release):
    assert refused_apply(cluster, release.jobs, "plain", busybox("true")) is None
    kept = busybox("true", serviceAccountName="default")
    assert refused_apply(cluster, release.jobs, "plain", kept) is None


def test_a_namespace_annotation_narrows_the_service_accounts_and_tenants_cannot_change_it(
    cluster, release
):
    cluster.kubectl(
        "annotate",
        "namespace",
        release.jobs,
        f"{jobpolicy.ANNOTATION_SERVICE_ACCOUNTS}=default,reports",
        "--overwrite",
    )
    try:
        wait_for(
            lambda: refused_apply(
                cluster, release.jobs, "as-admin", busybox("true", serviceAccountName="admin")
            ),
            30,
            describe="the namespace's annotation to apply",
        )
        refusal = refused_apply(
            cluster, release.jobs, "as-admin", busybox("true", serviceAccountName="admin")
        )
        assert refusal is not None
        assert (
            f"{POD}.serviceAccountName: admin is not allowed in namespace {release.jobs}"
        ) in refusal
        assert "pgsched.dev/allowed-service-accounts: default, reports" in refusal
        reports = busybox("true", serviceAccountName="reports")
        assert refused_apply(cluster, release.jobs, "as-reports", reports) is None
        # A tenant who administers the namespace (the built-in admin role, bound there)
        # may create ScheduledJobs but may not patch the Namespace that holds the policy.
        tenant = f"tenant-{secrets.token_hex(3)}"
        cluster.kubectl(
            "create",
            "rolebinding",
            tenant,
            "-n",
            release.jobs,
            "--clusterrole=admin",
            f"--user={tenant}",
        )
        can_i = cluster.kubectl(
            "auth", "can-i", "patch", f"namespace/{release.jobs}", f"--as={tenant}", check=False
        )
        assert can_i.stdout.strip() == "no"
    finally:
        cluster.kubectl(
            "annotate", "namespace", release.jobs, f"{jobpolicy.ANNOTATION_SERVICE_ACCOUNTS}-"
        )


def dry_run_job(cluster: ControlPlane, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """The Job as the API server would store it (its defaulting applied), not stored."""
    return cluster.api.request(
        "POST",
        api.path_of(group="batch", version="v1", namespace=namespace, plural="jobs"),
        body=job,
        query={"dryRun": "All"},
    )


def test_an_empty_service_account_name_cannot_smuggle_the_deprecated_field_past_the_policy(
    cluster, release
):
    """``serviceAccountName: ""`` beside the deprecated ``serviceAccount: admin``: the API
    server runs such a pod as admin, so the admission policy judges admin, and the Job
    pgsched builds names the account the operator's policy judged, and only that one."""
    smuggling = {"serviceAccountName": "", "serviceAccount": "admin"}
    # The premise, from the API server itself: its defaulting copies the deprecated field
    # over an empty serviceAccountName (checked on a Job's pod template, dry run).
    plain = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"smuggler-{secrets.token_hex(3)}"},
        "spec": busybox("true", restartPolicy="Never", **smuggling)["spec"],
    }
    defaulted = dry_run_job(cluster, release.jobs, plain)["spec"]["template"]["spec"]
    assert defaulted["serviceAccountName"] == "admin"

    cluster.kubectl(
        "annotate",
        "namespace",
        release.jobs,
        f"{jobpolicy.ANNOTATION_SERVICE_ACCOUNTS}=default,reports",
        "--overwrite",
    )
    try:
        # Each probe a new object: one accepted before the annotation applied would not be
        # checked again while its spec stays the same.
        wait_for(
            lambda: refused_apply(
                cluster,
                release.jobs,
                f"probe-{secrets.token_hex(3)}",
                busybox("true", serviceAccountName="admin"),
            ),
            30,
            describe="the namespace's annotation to apply",
        )
        refusal = refused_apply(cluster, release.jobs, "smuggler", busybox("true", **smuggling))
        assert refusal is not None
        assert (
            f"{POD}.serviceAccount: admin is not allowed in namespace {release.jobs}"
        ) in refusal
        assert cluster.kubectl("get", "sj", "smuggler", "-n", release.jobs, check=False).returncode
        # The operator's policy judges the same account (before launch, and where no
        # admission policy is installed).
        found = jobpolicy.refusal(
            jobpolicy.JobPolicy(),
            namespace=release.jobs,
            spec={"jobTemplate": busybox("true", **smuggling)},
            annotations={jobpolicy.ANNOTATION_SERVICE_ACCOUNTS: "default,reports"},
        )
        assert found is not None and f"{POD}.serviceAccount: 'admin' is not allowed" in found
    finally:
        cluster.kubectl(
            "annotate", "namespace", release.jobs, f"{jobpolicy.ANNOTATION_SERVICE_ACCOUNTS}-"
        )

    # What pgsched builds runs as what was judged: serviceAccountName wins over the
    # deprecated field in the API server, and the built Job carries serviceAccountName alone.
    judged = busybox("true", serviceAccountName="reports", serviceAccount="admin")
    built = jobs.build(
        fixture_definition(namespace=release.jobs, spec={"jobTemplate": judged}),
        fixture_run(),
        job_settings("ghcr.io/pgsched/pgsched:dev"),
    )
    assert "serviceAccount" not in built["spec"]["template"]["spec"]
    stored = dry_run_job(cluster, release.jobs, built)["spec"]["template"]["spec"]
    assert (stored["serviceAccountName"], stored.get("serviceAccount")) == ("reports", "reports")


# -- the operator's own Secret writes ------------------------------------------------------------


@pytest.fixture(scope="module")
def as_operator(
    cluster: ControlPlane, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> api.KubeApi:
    """An API client authenticated as the release's ServiceAccount, as the operator is."""
    return client_as(cluster, release.home, release.account, tmp_path_factory.mktemp("operator"))


def secret(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "stringData": {"k": "v"},
    }


def test_the_operator_cannot_create_patch_or_delete_a_secret_that_is_not_its_own(
    cluster, release, as_operator
):
    collection = api.path_of(namespace=release.jobs, plural="secrets")
    cluster.api.create(collection, secret("tenant-credentials"))
    path = f"{collection}/tenant-credentials"
    for attempt in [
        lambda: as_operator.create(collection, secret("planted")),
        lambda: as_operator.create(collection, secret("planted-lease")),  # a name is not enough
        lambda: as_operator.merge_patch(path, {"metadata": {"labels": {names.LABEL_RUN_ID: "1"}}}),
        lambda: as_operator.delete(path),
    ]:
        with pytest.raises(api.ApiError) as refused:
            attempt()
        assert refused.value.status == 403, refused.value
        assert "the pgsched operator" in refused.value.message
    assert cluster.api.get(path)["data"] == {"k": "dg=="}  # base64 of "v": untouched


def test_the_operator_still_creates_patches_and_deletes_its_lease_secrets(
    cluster, release, as_operator
):
    collection = api.path_of(namespace=release.jobs, plural="secrets")
    lease = secret("nightly-7-lease", **{names.LABEL_RUN_ID: "7"})
    as_operator.create(collection, lease)
    path = f"{collection}/nightly-7-lease"
    as_operator.merge_patch(path, {"stringData": {"k": "w"}})
    as_operator.delete(path)
    with pytest.raises(AdminApiError) as gone:
        cluster.api.get(path)
    assert gone.value.status == 404


# -- the operator alone: no admission policy selects this namespace ------------------------------


def ready_condition(sj, name: str) -> dict[str, Any] | None:
    conditions = (sj.get(name).get("status") or {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), None)


def test_the_operator_refuses_a_forbidden_template_precisely_and_runs_the_others(
    operators, sj, cluster
):
    operators.start(PGSCHED_JOB_SERVICE_ACCOUNTS="default")
    run_now = {names.ANNOTATION_RUN_NOW: "go"}
    sj.apply("fine", {"schedule": "0 0 1 1 *", "jobTemplate": busybox("true")}, annotations=run_now)
    thief = busybox("true", serviceAccountName="admin")
    thief["spec"]["template"]["spec"]["volumes"] = [
        {"name": "l", "secret": {"secretName": "fine-1-lease"}}
    ]
    sj.apply("thief", {"schedule": "* * * * *", "jobTemplate": thief}, annotations=run_now)

    ready = wait_for(
        lambda: (c := ready_condition(sj, "thief")) and c["status"] == "False" and c,
        30,
        describe=lambda: json.dumps(sj.get("thief").get("status")),
    )
    assert ready["reason"] == "InvalidSpec"
    assert (
        f"{POD}.serviceAccountName: 'admin' is not allowed in namespace {sj.namespace}"
        " (allowed: default)"
    ) in ready["message"]
    assert (
        f"{POD}.volumes[0].secret.secretName: 'fine-1-lease' is a name of pgsched's per-run"
        " lease Secrets"
    ) in ready["message"]
    assert "InvalidSpec" in {event["reason"] for event in sj.events("thief")}
    sj.wait_runs("fine", lambda found: found and found[0]["status"] == "COMPLETED", 90, "fine")
    assert sj.runs("thief") == [] and sj.jobs("thief") == []


def test_the_operator_refuses_jobs_in_its_own_namespace(operators, sj):
    operators.start(PGSCHED_OPERATOR_NAMESPACE=sj.namespace)
    sj.apply(
        "beside",
        {"schedule": "* * * * *", "jobTemplate": busybox("true")},
        annotations={names.ANNOTATION_RUN_NOW: "go"},
    )
    ready = wait_for(
        lambda: (c := ready_condition(sj, "beside")) and c["status"] == "False" and c,
        30,
        describe=lambda: json.dumps(sj.get("beside").get("status")),
    )
    assert ready["message"].startswith(
        f"metadata.namespace: '{sj.namespace}' is the pgsched operator's own namespace"
    )
    assert sj.runs("beside") == [] and sj.jobs("beside") == []


def test_where_jobs_may_run_beside_the_operator_its_account_and_secret_stay_forbidden(
    operators, sj
):
    operators.start(
        PGSCHED_OPERATOR_NAMESPACE=sj.namespace,
        PGSCHED_ALLOW_OPERATOR_NAMESPACE="true",
        PGSCHED_OPERATOR_SERVICE_ACCOUNT="pgsched",
        PGSCHED_OPERATOR_SECRETS="pgsched-database",
    )
    impostor = busybox("true", serviceAccountName="pgsched")
    impostor["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"secretRef": {"name": "pgsched-database"}}
    ]
    sj.apply("impostor", {"schedule": "* * * * *", "jobTemplate": impostor})
    ready = wait_for(
        lambda: (c := ready_condition(sj, "impostor")) and c["status"] == "False" and c,
        30,
        describe=lambda: json.dumps(sj.get("impostor").get("status")),
    )
    assert (
        f"{POD}.serviceAccountName: 'pgsched' is not allowed in namespace {sj.namespace}"
        " (allowed: any except pgsched)"
    ) in ready["message"]
    assert (
        f"{POD}.containers[0].envFrom[0].secretRef.name: Secret 'pgsched-database' is not"
        f" allowed in namespace {sj.namespace} (allowed: any except pgsched-database)"
    ) in ready["message"]
    assert sj.runs("impostor") == []


def test_a_launch_the_namespace_policy_forbids_fails_and_creates_nothing(conn, crd, sj, cluster):
    """The namespace narrowed its ServiceAccounts after the generation was accepted (the
    sync checks the operator's lists; the namespace's are read at launch)."""
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    k8s = launcher.KubernetesLauncher(
        kube, job_settings("ghcr.io/pgsched/pgsched:dev"), connect=no_database
    )
    template = busybox("true", serviceAccountName="admin")
    sj.apply("older", {"schedule": "0 0 1 1 *", "jobTemplate": template})
    uid = uuid.UUID(sj.get("older")["metadata"]["uid"])
    definition = define(
        conn, "older", namespace=sj.namespace, uid=uid, schedule="0 0 1 1 *", jobTemplate=template
    )
    runs.run_now(conn, definition.id, token="t")
    [run] = dispatch.run_once(conn, RecordingLauncher(), definition_ids=[definition.id]).claimed
    cluster.kubectl(
        "annotate", "namespace", sj.namespace, f"{jobpolicy.ANNOTATION_SERVICE_ACCOUNTS}=default"
    )

    with pytest.raises(LaunchError) as refused:
        k8s.launch(run, definition)

    assert (
        f"{POD}.serviceAccountName: 'admin' is not allowed in namespace {sj.namespace}"
        " (allowed: default)"
    ) in str(refused.value)
    assert sj.jobs("older") == []
    leases = cluster.api.get(api.path_of(namespace=sj.namespace, plural="secrets"))["items"]
    assert [s for s in leases if s["metadata"]["name"].endswith("-lease")] == []
