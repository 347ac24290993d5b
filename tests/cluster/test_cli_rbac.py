"""Imperative actions under Kubernetes RBAC, on the real API server (issue 25 #10).

``pgsched run-now``, ``cancel``, ``backfill``, ``suspend`` and ``resume`` go through the API
server by default, as the user the kubeconfig names: a user who may only ``get``
ScheduledJobs can do none of them (even with the schema owner's DSN in the environment),
a user who may ``patch`` them can, and the run records that user's name — which the API
server vouches for with the chart's ValidatingAdmissionPolicy (rendered from the chart and
applied as is). Bad request values get a Warning Event naming the accepted values and
change nothing else. ``--database`` stays the administrator's path and says it bypasses
RBAC.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from cli_runner import Result, pgsched
from devenv import kubeconfig
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched.db import connection
from pgsched.k8s.client import api
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import commands, scheduledjob_writer, scheduledjobs
from plugins.operator import busybox

# Alone on the cluster: the chart's requester policy is a cluster-wide admission policy.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

CHART = Path(__file__).resolve().parents[2] / "charts" / "pgsched"
NEVER = "0 0 1 1 *"
READ = [{"apiGroups": ["pgsched.dev"], "resources": ["scheduledjobs"], "verbs": ["get"]}]
PATCH = [
    {"apiGroups": ["pgsched.dev"], "resources": ["scheduledjobs"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get"]},
]


@dataclass(frozen=True)
class User:
    name: str  # what the API server authenticates the token as
    kubeconfig: Path


@pytest.fixture(scope="module")
def requester_policy(cluster: ControlPlane, crd: None) -> Iterator[None]:
    """The chart's requester policy, as ``helm template`` renders it (cluster-scoped: a
    release name of its own, removed afterwards)."""
    release = f"rq{secrets.token_hex(3)}"
    rendered = cluster.helm(
        "template",
        release,
        CHART,
        "--show-only",
        "templates/requester-policy.yaml",
        # The chart refuses to render without the namespaces it serves; the policy itself is
        # cluster-wide whatever they are.
        "--set",
        "watchNamespaces={jobs}",
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert {obj["kind"] for obj in objects} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    yield
    for obj in objects:
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--wait=false")


def user(cluster: ControlPlane, namespace: str, name: str, rules: list, tmp_path: Path) -> User:
    """A ServiceAccount holding ``rules`` in ``namespace``, and a kubeconfig with its token."""
    api, rbac = cluster.api, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    api.create(f"{rbac}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                 "metadata": {"name": name}, "rules": rules})  # fmt: skip
    api.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": namespace, "name": name}],
        },
    )
    token = wait_for(
        lambda: cluster.kubectl("create", "token", name, "-n", namespace).stdout.strip(),
        30,
        describe=f"a token for {namespace}/{name}",
    )
    path = kubeconfig.write(
        tmp_path / f"{name}.kubeconfig",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user=name,
        token=token,
        namespace=namespace,
    )
    return User(f"system:serviceaccount:{namespace}:{name}", path)


def synced(operators, sj, name: str, command: str) -> None:
    """An operator, and a ScheduledJob it has synced (its status is written)."""
    operators.start()
    sj.apply(name, {"schedule": NEVER, "jobTemplate": busybox(command)})
    wait_for(lambda: sj.get(name).get("status"), 30, describe=f"{name} synced")


def kubectl_as(cluster: ControlPlane, who: User, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.binaries.kubectl), "--kubeconfig", str(who.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def as_user(who: User, *argv: str, dsn: str | None = None) -> Result:
    return pgsched(*argv, kubeconfig=who.kubeconfig, dsn=dsn, timeout=90)


def requester_of(sj, run_id: int) -> str | None:
    row = sj.conn.execute(
        "SELECT requested_by FROM pgsched.run_requesters WHERE run_id = %s", [run_id]
    ).fetchone()
    return row["requested_by"] if row else None


def described_requester(operators, run_id: int) -> str:
    """The "Requested by" line of ``pgsched describe``."""
    described = pgsched("describe", str(run_id), dsn=operators.dsn).out
    [line] = [line for line in described.splitlines() if line.startswith("Requested by:")]
    return line.split(":", 1)[1].strip()


def request_annotations(sj, name: str) -> dict[str, str]:
    annotations = sj.get(name)["metadata"].get("annotations") or {}
    return {key: value for key, value in annotations.items() if key.startswith("pgsched.dev/")}


def test_a_user_who_may_only_get_scheduledjobs_can_neither_run_cancel_backfill_nor_suspend(
    operators, sj, cluster, namespace, tmp_path, requester_policy
):
    operators.start()
    sj.apply("guarded", {"schedule": "0 * * * *", "jobTemplate": busybox("true")})
    wait_for(lambda: sj.runs("guarded") == [] and sj.get("guarded").get("status"), 30,
             describe="the ScheduledJob synced")  # fmt: skip
    reader = user(cluster, namespace, "reader", READ, tmp_path)
    before = sj.get("guarded")

    # The schema owner's DSN in the environment changes nothing: only --database uses it.
    dsn = operators.dsn
    attempts = {
        "run-now": as_user(reader, "run-now", "guarded", dsn=dsn),
        "cancel": as_user(reader, "cancel", "guarded", "--all", dsn=dsn),
        "backfill": as_user(
            reader, "backfill", "guarded", "--from", "2026-01-01", "--to", "2026-01-01", dsn=dsn
        ),
        "suspend": as_user(reader, "suspend", "guarded", dsn=dsn),
    }

    for command, result in attempts.items():
        assert result.code == 1, (command, result)
        assert (
            f"Kubernetes RBAC refused: you may not patch scheduledjobs.pgsched.dev in namespace"
            f" {namespace} (this needs the `patch` permission on scheduledjobs.pgsched.dev"
            in result.err
        ), (command, result.err)
    after = sj.get("guarded")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert not after["spec"].get("suspend")
    assert request_annotations(sj, "guarded") == {}
    assert sj.runs("guarded") == []


def test_a_user_who_may_patch_runs_cancels_backfills_and_suspends_and_is_recorded(
    operators, sj, cluster, namespace, tmp_path, requester_policy
):
    synced(operators, sj, "served", "sleep 300")
    writer = user(cluster, namespace, "writer", PATCH, tmp_path)

    queued = as_user(writer, "run-now", "served", "--token", "deploy-1")
    assert queued.code == 0, queued.err
    assert queued.out.strip() == (
        f"run-now (token deploy-1) of {namespace}/served sent through the Kubernetes API"
        f" server (requested by {writer.name}); the operator took it"
    )
    [run] = sj.wait_runs("served", lambda rows: len(rows) == 1, 30)
    assert (run["trigger"], run["request_token"]) == ("manual", "annotation:deploy-1")
    assert requester_of(sj, run["id"]) == writer.name
    assert described_requester(operators, run["id"]) == writer.name

    cancelled = as_user(writer, "cancel", "served", str(run["id"]))
    assert cancelled.code == 0, cancelled.err
    wait_for(
        lambda: sj.runs("served")[0]["cancelled_by"] == f"Annotation ({writer.name})",
        30,
        describe="the cancellation recorded with its requester",
    )

    backfilled = as_user(
        writer, "backfill", "served", "--from", "2025-01-01", "--to", "2025-01-01", "-o", "json"
    )
    assert backfilled.code == 0, backfilled.err
    assert backfilled.json()["occurrences"] == 1 and backfilled.json()["taken"]
    rows = sj.wait_runs("served", lambda rows: len(rows) == 2, 30)
    assert rows[1]["trigger"] == "backfill" and requester_of(sj, rows[1]["id"]) == writer.name

    suspended = as_user(writer, "suspend", "served")
    assert suspended.code == 0 and "spec.suspend set to true" in suspended.out, suspended.err
    assert sj.get("served")["spec"]["suspend"] is True
    resumed = as_user(writer, "resume", "served")
    assert resumed.code == 0 and "spec.suspend set to false" in resumed.out, resumed.err
    assert sj.get("served")["spec"]["suspend"] is False
    assert request_annotations(sj, "served") == {}  # every request taken and removed


def test_the_api_server_refuses_a_requester_who_is_not_the_user_writing_it(
    operators, sj, cluster, namespace, tmp_path, requester_policy
):
    sj.apply("forged", {"schedule": NEVER, "jobTemplate": busybox("true")})
    mallory = user(cluster, namespace, "mallory", PATCH, tmp_path)
    alice = user(cluster, namespace, "alice", PATCH, tmp_path)

    def annotate(who: User, *pairs: str) -> subprocess.CompletedProcess[str]:
        return kubectl_as(cluster, who, "annotate", "sj", "forged", *pairs, "--overwrite")

    forged = annotate(
        mallory, "pgsched.dev/run-now=x", f"pgsched.dev/run-now-requested-by={alice.name}"
    )
    assert forged.returncode == 1
    assert (
        f'pgsched.dev/run-now-requested-by: "{alice.name}" is not the user making this'
        f' request ("{mallory.name}")' in forged.stderr
    ), forged.stderr
    assert request_annotations(sj, "forged") == {}

    # Before an operator takes it, alice's signed request is on the object: mallory
    # cannot slip her own request under alice's name by leaving the requester as it is.
    honest = annotate(
        alice, "pgsched.dev/run-now=y", f"pgsched.dev/run-now-requested-by={alice.name}"
    )
    assert honest.returncode == 0, honest.stderr
    borrowed = annotate(mallory, "pgsched.dev/run-now=w")
    assert borrowed.returncode == 1 and "is not the user making this request" in borrowed.stderr
    # Nor give alice's waiting request her own parameters (issue 29): they are the request.
    slipped = annotate(mallory, 'pgsched.dev/run-now-parameters={"region": "mallory"}')
    assert slipped.returncode == 1 and "is not the user making this request" in slipped.stderr
    assert request_annotations(sj, "forged") == {
        "pgsched.dev/run-now": "y",
        "pgsched.dev/run-now-requested-by": alice.name,
    }

    operators.start()
    [run] = sj.wait_runs("forged", lambda rows: len(rows) == 1, 30)
    assert run["request_token"] == "annotation:y" and requester_of(sj, run["id"]) == alice.name
    # The run is queued before the request is removed (once the standbys have the commit,
    # if any): until then alice's request is on the object, and mallory cannot touch it.
    wait_for(
        lambda: request_annotations(sj, "forged") == {},
        30,
        describe=lambda: f"the request removed: {request_annotations(sj, 'forged')}",
    )

    by_hand = annotate(mallory, "pgsched.dev/run-now=z")  # no requester: recorded as unknown
    assert by_hand.returncode == 0, by_hand.stderr
    rows = sj.wait_runs("forged", lambda rows: len(rows) == 2, 30)
    assert requester_of(sj, rows[1]["id"]) is None
    assert described_requester(operators, rows[1]["id"]).startswith(
        "unknown (the request named nobody"
    )


def test_bad_request_values_get_one_warning_event_naming_the_accepted_values(
    operators, sj, cluster, namespace
):
    # Two replicas, as the chart runs: both see the request; one Event, one log line.
    operators.start()
    operators.start()
    sj.apply("noisy", {"schedule": NEVER, "jobTemplate": busybox("sleep 300")})
    sj.annotate("noisy", "pgsched.dev/run-now", "first")
    [run] = sj.wait_runs("noisy", lambda rows: len(rows) == 1, 30)

    sj.annotate("noisy", "pgsched.dev/cancel", "bogus")
    sj.annotate("noisy", "pgsched.dev/backfill", "last-week")

    def warnings() -> list[str]:
        return sorted(
            event["message"]
            for event in sj.events("noisy")
            if event["reason"] == "InvalidAnnotation" and event["type"] == "Warning"
        )

    expected = [
        'pgsched.dev/backfill: "last-week" is not <from>/<to>'
        " (example: pgsched.dev/backfill=2026-06-01T00:00:00Z/2026-06-07T23:59:59Z)",
        'pgsched.dev/cancel: "bogus" is not a run id or "all" (example: pgsched.dev/cancel=all)',
    ]
    wait_for(lambda: warnings() == expected, 30, describe=lambda: f"warnings {warnings()}")
    wait_for(lambda: request_annotations(sj, "noisy") == {}, 30, describe="requests removed")
    [after] = sj.runs("noisy")
    assert (after["id"], after["cancel_requested"]) == (run["id"], False)
    assert warnings() == expected  # once each
    logs = [replica.log() for replica in operators.started]
    said = [log.count('pgsched.dev/cancel: "bogus" is not a run id') for log in logs]
    assert sum(said) == 1, f"logged by one replica, once: {said}"


def test_the_cli_reports_a_request_the_operator_refused(
    operators, sj, cluster, namespace, tmp_path, requester_policy
):
    synced(operators, sj, "mine", "true")
    writer = user(cluster, namespace, "writer", PATCH, tmp_path)
    refused = as_user(writer, "cancel", "mine", "424242")
    assert refused.code == 1
    assert refused.err.strip().endswith(
        f"the operator refused the request: pgsched.dev/cancel: run 424242 is not a run of"
        f" {namespace}/mine (example: pgsched.dev/cancel=all)"
    )


def test_the_database_path_still_works_for_an_administrator_and_says_it_bypasses_rbac(
    operators, sj, namespace
):
    synced(operators, sj, "admin", "true")
    result = pgsched("run-now", "admin", "-n", namespace, "--database", dsn=operators.dsn)
    assert result.code == 0, result.err
    assert result.out.startswith("run ") and "queued" in result.out
    assert "Kubernetes RBAC and the API server's audit log do not apply" in result.err
    [run] = sj.runs("admin")
    assert requester_of(sj, run["id"]).startswith("CLI (")


def test_a_request_replaced_before_the_operator_removes_it_stays_for_its_own_turn(
    sj, cluster, crd, dsn
):
    """The operator removes a handled request with a JSON patch that tests its value: a
    newer request written meanwhile is neither removed nor retried into a loop."""
    sj.apply(
        "replaced", {"schedule": NEVER, "jobTemplate": busybox("true")},
        annotations={"pgsched.dev/run-now": "newer"},
    )  # fmt: skip
    kube = api.KubeApi.from_environment(kubeconfig=str(cluster.kubeconfig))
    with connection.pool(dsn, name="pgsched-test-requests", max_size=1) as pool:
        context = scheduledjobs.Context(
            pool=pool, kube=kube, publisher=Publisher(kube), clock=lambda: None
        )
        handled = commands.Request("pgsched.dev/run-now", "older", "alice")
        writes = replace(scheduledjobs.Writes.of(sj.get("replaced")), remove=(handled,))
        assert scheduledjob_writer.write(context, writes) is None  # done: nothing to retry
    assert request_annotations(sj, "replaced") == {"pgsched.dev/run-now": "newer"}
