"""The jobTemplate policy: which ServiceAccounts and Secrets a ScheduledJob may name, and
where jobs may run (pgsched.k8s.jobside.jobpolicy)."""

from __future__ import annotations

from typing import Any

import pytest

from pgsched.k8s.jobside.jobpolicy import (
    ANNOTATION_SECRETS,
    ANNOTATION_SERVICE_ACCOUNTS,
    JobPolicy,
    refusals,
    secret_references,
    service_account,
)

CHART = JobPolicy(
    operator_namespace="pgsched",
    operator_service_account="pgsched",
    operator_secrets=("pgsched-database",),
)
POD = "spec.jobTemplate.spec.template.spec"


def spec(**pod_spec: Any) -> dict[str, Any]:
    containers = pod_spec.pop("containers", [{"name": "main", "image": "busybox"}])
    return {
        "schedule": "@hourly",
        "jobTemplate": {"spec": {"template": {"spec": {"containers": containers, **pod_spec}}}},
    }


def messages(policy: JobPolicy, namespace: str, body: dict[str, Any], **annotations: str) -> str:
    return "\n".join(
        str(error)
        for error in refusals(policy, namespace=namespace, spec=body, annotations=annotations)
    )


def test_a_plain_job_in_a_watched_namespace_is_allowed():
    assert refusals(CHART, namespace="jobs", spec=spec(), annotations={}) == []


def test_jobs_never_run_in_the_operators_namespace_unless_allowed():
    found = messages(CHART, "pgsched", spec())
    assert found.startswith("metadata.namespace: 'pgsched' is the pgsched operator's own namespace")
    assert "allowReleaseNamespace" in found


def test_where_allowed_the_operators_namespace_still_forbids_its_account_and_secrets():
    policy = JobPolicy(**{**CHART.__dict__, "allow_operator_namespace": True})
    assert messages(policy, "pgsched", spec()) == ""
    found = messages(
        policy,
        "pgsched",
        spec(
            serviceAccountName="pgsched",
            volumes=[{"name": "db", "secret": {"secretName": "pgsched-database"}}],
        ),
    )
    assert (
        f"{POD}.serviceAccountName: 'pgsched' is not allowed in namespace pgsched"
        " (allowed: any except pgsched)"
    ) in found
    assert (
        f"{POD}.volumes[0].secret.secretName: Secret 'pgsched-database' is not allowed in"
        " namespace pgsched (allowed: any except pgsched-database)"
    ) in found


def test_the_same_names_in_another_namespace_are_other_objects_and_allowed():
    body = spec(serviceAccountName="pgsched", imagePullSecrets=[{"name": "pgsched-database"}])
    assert messages(CHART, "jobs", body) == ""


def test_no_job_may_name_a_lease_secret_anywhere():
    body = spec(
        containers=[
            {
                "name": "main",
                "image": "busybox",
                "env": [
                    {
                        "name": "TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "other-42-lease", "key": "t"}},
                    }
                ],
            }
        ]
    )
    found = messages(JobPolicy(), "jobs", body)
    assert found.startswith(
        f"{POD}.containers[0].env[0].valueFrom.secretKeyRef.name: 'other-42-lease' is a name of"
        " pgsched's per-run lease Secrets"
    )


def test_every_place_a_pod_spec_names_a_secret_is_found():
    pod_spec = spec(
        imagePullSecrets=[{"name": "pull"}],
        volumes=[
            {"name": "a", "secret": {"secretName": "volume"}},
            {"name": "b", "projected": {"sources": [{"secret": {"name": "projected"}}]}},
            {"name": "c", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi"}}},
            {"name": "d", "configMap": {"name": "not-a-secret"}},
        ],
        initContainers=[{"name": "init", "envFrom": [{"secretRef": {"name": "env-from"}}]}],
    )["jobTemplate"]["spec"]["template"]["spec"]
    assert dict(secret_references(pod_spec)) == {
        "imagePullSecrets[0].name": "pull",
        "volumes[0].secret.secretName": "volume",
        "volumes[1].projected.sources[0].secret.name": "projected",
        "volumes[2].csi.nodePublishSecretRef.name": "csi",
        "initContainers[0].envFrom[0].secretRef.name": "env-from",
    }


def test_the_chart_lists_narrow_every_namespace():
    policy = JobPolicy(service_accounts=("default", "reports"), secrets=("reports-db",))
    found = messages(
        policy,
        "jobs",
        spec(serviceAccountName="admin", volumes=[{"name": "x", "secret": {"secretName": "x"}}]),
    )
    assert (
        f"{POD}.serviceAccountName: 'admin' is not allowed in namespace jobs"
        " (allowed: default, reports) (example: default)"
    ) in found
    assert "Secret 'x' is not allowed in namespace jobs (allowed: reports-db)" in found
    assert messages(policy, "jobs", spec(serviceAccountName="reports")) == ""


@pytest.mark.parametrize(
    ("annotation", "account", "allowed"),
    [
        ("default, reports", "reports", True),
        ("default", "reports", False),
        ("", "default", False),  # an empty list allows nothing
        ("*", "anything", True),
    ],
)
def test_a_namespace_annotation_narrows_the_service_accounts(annotation, account, allowed):
    found = messages(
        JobPolicy(),
        "jobs",
        spec(serviceAccountName=account),
        **{ANNOTATION_SERVICE_ACCOUNTS: annotation},
    )
    assert (found == "") is allowed


def test_a_namespace_annotation_cannot_widen_the_chart_list():
    policy = JobPolicy(secrets=("reports-db",))
    body = spec(volumes=[{"name": "x", "secret": {"secretName": "other"}}])
    found = messages(policy, "jobs", body, **{ANNOTATION_SECRETS: "*"})
    assert "Secret 'other' is not allowed in namespace jobs (allowed: reports-db)" in found


def test_an_unset_service_account_is_the_namespaces_default_one():
    found = messages(JobPolicy(service_accounts=("reports",)), "jobs", spec())
    assert f"{POD}.serviceAccountName: 'default' is not allowed" in found


def test_the_deprecated_service_account_field_is_checked_too():
    found = messages(JobPolicy(service_accounts=("reports",)), "jobs", spec(serviceAccount="admin"))
    assert f"{POD}.serviceAccount: 'admin' is not allowed" in found


@pytest.mark.parametrize("empty", ["", None])
def test_an_empty_service_account_name_beside_the_deprecated_field_is_judged_as_the_deprecated_one(
    empty,
):
    """The API server runs the pod as serviceAccount when serviceAccountName is empty (its
    defaulting copies the deprecated field over): that is the account the policy judges."""
    found = messages(
        JobPolicy(service_accounts=("reports",)),
        "jobs",
        spec(serviceAccountName=empty, serviceAccount="admin"),
    )
    assert found == (
        f"{POD}.serviceAccount: 'admin' is not allowed in namespace jobs (allowed: reports)"
        " (example: reports)"
    )


def test_the_operators_account_in_the_deprecated_field_is_refused_in_its_namespace():
    policy = JobPolicy(
        operator_namespace="pgsched",
        operator_service_account="pgsched",
        allow_operator_namespace=True,
    )
    found = messages(policy, "pgsched", spec(serviceAccountName="", serviceAccount="pgsched"))
    assert f"{POD}.serviceAccount: 'pgsched' is not allowed in namespace pgsched" in found


def test_service_account_name_wins_over_the_deprecated_field_as_in_the_api_server():
    policy = JobPolicy(service_accounts=("reports",))
    assert messages(policy, "jobs", spec(serviceAccountName="reports", serviceAccount="x")) == ""
    found = messages(policy, "jobs", spec(serviceAccountName="admin", serviceAccount="reports"))
    assert f"{POD}.serviceAccountName: 'admin' is not allowed" in found


@pytest.mark.parametrize(
    ("pod_spec", "account"),
    [
        ({}, ("serviceAccountName", None)),
        ({"serviceAccountName": "", "serviceAccount": ""}, ("serviceAccountName", None)),
        ({"serviceAccount": "reports"}, ("serviceAccount", "reports")),
        ({"serviceAccountName": "", "serviceAccount": "reports"}, ("serviceAccount", "reports")),
        ({"serviceAccountName": None, "serviceAccount": "reports"}, ("serviceAccount", "reports")),
        ({"serviceAccountName": "a", "serviceAccount": "b"}, ("serviceAccountName", "a")),
    ],
)
def test_the_effective_service_account_is_the_api_servers(pod_spec, account):
    assert service_account(pod_spec) == account
