"""The admission webhook: `kubectl apply` of a spec the controller would refuse fails at
once, with the controller's own message; an unchanged re-apply always passes; an operator
outage blocks nothing (failurePolicy Ignore) and the controller still judges what slipped
through.

The operator runs as a host process here, as in every cluster test: kopf serves the
webhook on 127.0.0.1 and manages the ValidatingWebhookConfiguration, with a certificate
made like the cluster's. The API server is this module's own, without the node (no pod
runs here): the configuration kopf manages is cluster-wide, and on a cluster shared with
other tests it would refuse their deliberately invalid ScheduledJobs at apply.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from devenv import pki
from devenv.controlplane import ControlPlane
from devenv.processes import free_port
from devenv.waiting import wait_for
from pgsched import spec as spec_module
from plugins.cluster import host_only_cluster
from plugins.operator import busybox

pytestmark = pytest.mark.api_only


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    """An API server of this module's own, with pgsched's CRDs (module docstring)."""
    with host_only_cluster() as control_plane:
        yield control_plane


@pytest.fixture
def crd() -> None:
    """The module's cluster has the CRDs from its start."""


CRON = {"schedule": "0 8 * * *"}


@pytest.fixture
def webhook(cluster, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The operator's webhook settings; the configurations kopf made (a validating one,
    and an empty mutating one of the same name) are deleted after."""
    port = free_port()
    cluster.reach_host_port(port)
    configuration = f"pgsched-test-{uuid.uuid4().hex[:8]}.pgsched.dev"
    yield {
        "PGSCHED_WEBHOOK_BIND": f"127.0.0.1:{port}",
        "PGSCHED_WEBHOOK_CERT_DIR": str(
            pki.serving_tls(tmp_path / "webhook", ips=["127.0.0.1"], ca_name="pgsched-webhook-ca")
        ),
        "PGSCHED_WEBHOOK_CONFIGURATION": configuration,
    }
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        cluster.kubectl("delete", kind, configuration, "--ignore-not-found")


def manifest(namespace: str, name: str, spec: dict[str, Any], kind: str = "ScheduledJob") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "pgsched.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def apply(cluster, namespace: str, name: str, spec: dict[str, Any], **options: Any):
    return cluster.kubectl(
        "apply", "-f", "-", input=manifest(namespace, name, spec, **options), check=False
    )


def controller_message(namespace: str, name: str, spec: dict[str, Any]) -> str:
    """What the controller's Ready condition says of ``spec`` (the same function)."""
    now = datetime.now(UTC)
    with pytest.raises(spec_module.SpecError) as refused:
        spec_module.parse(
            spec, hash_seed=f"{namespace}/{name}", anchor=now, now=now, run_at_not_before=now
        )
    return str(refused.value)


def managed_configuration(cluster, webhook: dict[str, str]) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration kopf manages for the operator."""
    name = webhook["PGSCHED_WEBHOOK_CONFIGURATION"]
    output = cluster.kubectl("get", "validatingwebhookconfiguration", name, "-o", "json").stdout
    return dict(json.loads(output))


def start_with_webhook(operators, cluster, namespace: str, webhook: dict[str, str]):
    """An operator with the webhook, once the API server calls it (a dry run is refused)."""
    handle = operators.start(**webhook)
    probe = manifest(namespace, "probe", {"schedule": "61 * * * *", "jobTemplate": busybox("true")})
    wait_for(
        lambda: (
            "denied the request"
            in cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=probe, check=False
            ).stderr
        ),
        30,
        describe="the API server to call the webhook",
    )
    return handle


@pytest.mark.parametrize(
    "spec",
    [
        {"schedule": "61 * * * *"},
        {"schedule": "0 8 * * *", "timeZone": "Mars/Olympus"},
        {"rrule": "FREQ=DAILY;BYHOUR=25"},
        {"rrule": "FREQ=SOMETIMES"},
    ],
    ids=["bad-cron", "bad-zone", "rrule-out-of-range", "rrule-bad-freq"],
)
def test_apply_of_an_invalid_scheduled_job_fails_with_the_controllers_message(
    operators, cluster, namespace, webhook, spec
):
    handle = start_with_webhook(operators, cluster, namespace, webhook)
    spec = {**spec, "jobTemplate": busybox("true")}
    applied = apply(cluster, namespace, "bad", spec)
    assert applied.returncode != 0
    assert "denied the request: " + controller_message(namespace, "bad", spec) in applied.stderr
    found = cluster.kubectl("get", "sj", "bad", "-n", namespace, check=False)
    assert found.returncode != 0  # nothing was stored
    # A user's typo is no trouble of the operator's: said at INFO, never at ERROR.
    logged = handle.log()
    assert f"INFO pgsched.k8s.serve.webhook: refused {namespace}/bad: " in logged
    assert not [line for line in logged.splitlines() if " ERROR " in line], logged[-2000:]


def test_a_past_run_at_is_refused_on_create_and_when_changed_never_when_kept(
    operators, cluster, namespace, webhook, sj
):
    start_with_webhook(operators, cluster, namespace, webhook)
    past = {"runAt": "2020-01-01T09:00:00Z", "jobTemplate": busybox("true")}
    refused = apply(cluster, namespace, "typo", past)
    assert refused.returncode != 0
    assert "denied the request: spec.runAt: '2020-01-01T09:00:00Z' is " in refused.stderr
    assert "set runAtInPast: Run to run it now on purpose" in refused.stderr

    # A finished one-shot, as a GitOps tool re-syncs it long after its runAt.
    done = {**past, "runAtInPast": "Run", "suspend": True}
    assert apply(cluster, namespace, "once", done).returncode == 0
    wait_for(lambda: sj.condition("once"), 30, describe="the controller to judge it")
    for _ in range(2):
        again = apply(cluster, namespace, "once", done)
        assert again.returncode == 0, again.stderr
    # The runAt is kept, so it is not new: dropping the opt-in still passes ...
    kept = {key: value for key, value in done.items() if key != "runAtInPast"}
    assert apply(cluster, namespace, "once", kept).returncode == 0
    # ... and a new runAt in the past is refused, as on create.
    moved = apply(cluster, namespace, "once", {**kept, "runAt": "2021-01-01T09:00:00Z"})
    assert moved.returncode != 0
    assert "spec.runAt: '2021-01-01T09:00:00Z' is " in moved.stderr


def test_both_schedule_kinds_are_refused_at_apply(operators, cluster, namespace, webhook):
    """The CRD's own rule answers first (the API server validates the schema before it
    calls a webhook), so this holds with the webhook off too."""
    start_with_webhook(operators, cluster, namespace, webhook)
    both = {"schedule": "0 8 * * *", "rrule": "FREQ=DAILY", "jobTemplate": busybox("true")}
    applied = apply(cluster, namespace, "both", both)
    assert applied.returncode != 0
    assert "exactly one of schedule, rrule, runAt or schedules must be set" in applied.stderr


def test_an_operator_outage_blocks_no_apply_and_the_controller_judges_afterwards(
    operators, cluster, namespace, webhook, sj
):
    handle = start_with_webhook(operators, cluster, namespace, webhook)
    invalid = {"schedule": "61 * * * *", "jobTemplate": busybox("true")}
    refused = apply(cluster, namespace, "slipped", invalid)
    assert refused.returncode != 0
    said = refused.stderr.split("denied the request: ", 1)[1].strip()

    handle.stop()
    # The configuration stays (persistent), pointing at a server that is gone: Ignore.
    configuration = managed_configuration(cluster, webhook)
    assert {item["failurePolicy"] for item in configuration["webhooks"]} == {"Ignore"}
    valid = apply(cluster, namespace, "fine", {**CRON, "jobTemplate": busybox("true")})
    assert valid.returncode == 0, valid.stderr
    slipped = apply(cluster, namespace, "slipped", invalid)
    assert slipped.returncode == 0, slipped.stderr

    start_with_webhook(operators, cluster, namespace, webhook)
    condition = wait_for(
        lambda: sj.condition("slipped"),
        30,
        describe=lambda: f"the controller to judge it: {sj.get('slipped').get('status')}",
    )
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
    assert condition["message"] == said
    fine = wait_for(lambda: sj.condition("fine"), 30, describe="the valid one judged")
    assert fine["status"] == "True"
    # The operator's finalizer patch reached the one that slipped through, and re-applied
    # unchanged it passes.
    assert "pgsched.dev/finalizer" in sj.get("slipped")["metadata"].get("finalizers", [])
    assert apply(cluster, namespace, "slipped", invalid).returncode == 0


def test_concurrency_pools_go_through_the_webhook_too(operators, cluster, namespace, webhook):
    start_with_webhook(operators, cluster, namespace, webhook)
    configuration = managed_configuration(cluster, webhook)
    resources = {
        resource
        for item in configuration["webhooks"]
        for rule in item["rules"]
        for resource in rule["resources"]
    }
    assert resources == {"scheduledjobs", "concurrencypools", "calendars", "notificationpolicies"}
    pool = {"limit": 2}
    for _ in range(2):
        applied = apply(cluster, namespace, "warehouse", pool, kind="ConcurrencyPool")
        assert applied.returncode == 0, applied.stderr
    # The CRD's schema refuses a limit below 1 before any webhook is called.
    zero = apply(cluster, namespace, "warehouse", {"limit": 0}, kind="ConcurrencyPool")
    assert zero.returncode != 0
    assert "spec.limit" in zero.stderr


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return (
        int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        / 1024
    )


def review(index: int, spec: dict[str, Any], *, create: bool = False) -> bytes:
    """An update (or the creation) of ScheduledJob number ``index`` (its own uid), as the
    API server sends it."""
    body = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": f"job-{index}",
            "namespace": "jobs",
            "uid": str(uuid.UUID(int=index)),
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "spec": spec,
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "pgsched.dev", "version": "v1alpha1", "kind": "ScheduledJob"},
                "resource": {
                    "group": "pgsched.dev",
                    "version": "v1alpha1",
                    "resource": "scheduledjobs",
                },
                "operation": "CREATE" if create else "UPDATE",
                "userInfo": {"username": "gitops"},
                "object": body,
                "oldObject": None if create else body,
            },
        }
    ).encode()


def test_the_webhook_costs_little_memory_and_none_per_object_it_admits(
    operators, cluster, namespace, webhook
):
    """kopf with admission handlers only: its import and server, and nothing kept per
    ScheduledJob (kopf would otherwise keep a memory of every object it was asked about)."""
    plain = operators.start()
    wait_for(plain.listed, 30, describe="the operator to list")
    time.sleep(3)
    without = rss_mib(plain.pid)
    plain.stop()

    handle = start_with_webhook(operators, cluster, namespace, webhook)
    time.sleep(3)
    served = rss_mib(handle.pid)
    host, port = webhook["PGSCHED_WEBHOOK_BIND"].split(":")
    context = ssl.create_default_context(
        cafile=str(Path(webhook["PGSCHED_WEBHOOK_CERT_DIR"]) / "ca.crt")
    )
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    spec = {**CRON, "jobTemplate": busybox("true")}
    try:
        for batch in range(2):
            for index in range(batch * 5_000, (batch + 1) * 5_000):
                connection.request(
                    "POST",
                    "/scheduledjobs",
                    review(index, spec),
                    {"Content-Type": "application/json"},
                )
                answer = json.loads(connection.getresponse().read())
                assert answer["response"]["allowed"] is True
            if batch == 0:
                warm = rss_mib(handle.pid)  # the allocator's pools after the first requests
    finally:
        connection.close()
    after = rss_mib(handle.pid)
    print(
        f"\noperator RSS: {without:.1f} MiB without the webhook, {served:.1f} MiB serving it,"
        f" {warm:.1f} MiB after 5,000 updates of distinct ScheduledJobs, {after:.1f} MiB after"
        " 10,000"
    )
    assert served - without < 40
    assert after - warm < 3  # kopf's own memories kept ~1 KiB each: +4.9 MiB (measured)


def ask_directly(webhook: dict[str, str], client: pki.KeyPair | None) -> dict[str, Any]:
    """An AdmissionReview posted straight to the webhook, as anyone who reaches its port
    could, presenting ``client``'s certificate (or none)."""
    host, port = webhook["PGSCHED_WEBHOOK_BIND"].split(":")
    context = ssl.create_default_context(
        cafile=str(Path(webhook["PGSCHED_WEBHOOK_CERT_DIR"]) / "ca.crt")
    )
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    try:
        body = review(0, {"schedule": "61 * * * *", "jobTemplate": busybox("true")}, create=True)
        connection.request("POST", "/scheduledjobs", body, {"Content-Type": "application/json"})
        return dict(json.loads(connection.getresponse().read()))
    finally:
        connection.close()


def test_with_a_client_ca_the_webhook_answers_the_api_server_and_nobody_else(
    operators, cluster, namespace, webhook
):
    """The API server presents its webhook client certificate (its admission
    configuration, devenv/controlplane.py); any other caller fails the TLS handshake before
    a byte of its request is read, so no spec reaches the parser's CPU."""
    keys = cluster.certificates
    verified = {**webhook, "PGSCHED_WEBHOOK_CLIENT_CA_FILE": str(keys.webhook_client_ca)}
    start_with_webhook(operators, cluster, namespace, verified)  # the API server is answered

    spec = {"schedule": "61 * * * *", "jobTemplate": busybox("true")}
    applied = apply(cluster, namespace, "bad", spec)
    assert applied.returncode != 0
    assert "denied the request: " + controller_message(namespace, "bad", spec) in applied.stderr
    for stranger in (None, keys.admin):  # no certificate; one the cluster's own CA signed
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            ask_directly(verified, stranger)
    answer = ask_directly(verified, keys.webhook_client)  # what the API server holds
    assert answer["response"]["allowed"] is False


def test_without_a_client_ca_anyone_who_reaches_the_port_is_answered(
    operators, cluster, namespace, webhook
):
    """The default, which docs/admission.md tells administrators to close."""
    start_with_webhook(operators, cluster, namespace, webhook)
    assert ask_directly(webhook, None)["response"]["allowed"] is False


def test_a_client_ca_file_that_is_no_ca_stops_the_start_naming_the_setting(
    operators, webhook, tmp_path
):
    wrong = tmp_path / "not-a-ca.crt"
    wrong.write_text("not a certificate\n")
    handle = operators.start(wait=False, **webhook, PGSCHED_WEBHOOK_CLIENT_CA_FILE=str(wrong))
    assert handle.process.wait(timeout=60) != 0
    assert f"PGSCHED_WEBHOOK_CLIENT_CA_FILE={wrong}: not a readable PEM CA bundle" in handle.log()
