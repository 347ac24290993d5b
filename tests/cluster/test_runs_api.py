"""The Run API through the real aggregation layer: `kubectl get runs` answered from the
database, each user seeing only the namespaces RBAC lets them list, and the server
believing the API server's user headers only on the API server's front-proxy connection.

Real parts: kube-apiserver with the aggregation layer's front-proxy certificates
(``devenv.controlplane``), the APIService, Service and endpoints the chart would write
(``devenv.runs_api``), the operator as a host process serving the Run API, real kubectl
as ServiceAccounts bound by RBAC, and the database. The API server is this module's own:
an APIService is cluster-wide, and discovery on a cluster shared with other tests would
depend on this module's operator being up.
"""

from __future__ import annotations

import http.client
import json
import secrets
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_runner import pgsched
from cluster.test_cli_rbac import as_user, kubectl_as, user
from db.test_notifications import claimed_run, end_run
from devenv import pki
from devenv import runs_api as registration
from devenv.adminclient import ApiError
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from factories import define
from pgsched.engine import lease, runs
from pgsched.k8s.runs_api import changes
from plugins.cluster import create_namespace, host_only_cluster
from plugins.operator import busybox

pytestmark = pytest.mark.api_only

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NEVER_DUE = "0 3 1 1 *"  # the runs here are made by the test, not the schedule
READ_RUNS = [{"apiGroups": ["runs.pgsched.dev"], "resources": ["runs"], "verbs": ["get", "list"]}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    """An API server of this module's own (module docstring)."""
    with host_only_cluster("team-a", "team-b") as control_plane:
        yield control_plane


@pytest.fixture
def crd() -> None:
    """The module's cluster has the CRDs from its start."""


@pytest.fixture
def history(conn) -> dict[str, list[str]]:
    """Runs of two teams: nightly in team-a (3 completed, 2 failed), export in team-b.
    Returns each namespace's run names, newest first."""
    nightly = define(conn, "nightly", namespace="team-a", schedule=NEVER_DUE, now=T0)
    export = define(conn, "export", namespace="team-b", schedule=NEVER_DUE, now=T0)
    names: dict[str, list[str]] = {"team-a": [], "team-b": []}
    outcomes = [("team-a", nightly, "COMPLETED")] * 3 + [("team-a", nightly, "FAILED")] * 2
    outcomes += [("team-b", export, "COMPLETED")] * 2
    for index, (namespace, job, status) in enumerate(outcomes):
        at = T0 + timedelta(minutes=index)
        run = claimed_run(conn, job, at)
        reason = "NonZeroExit" if status == "FAILED" else None
        end_run(conn, run, status, at + timedelta(seconds=30), reason=reason)
        names[namespace].insert(0, f"{job.name}-{run.id}")
    return names


@pytest.fixture
def served(operators, cluster, tmp_path: Path) -> Iterator[registration.RunsApi]:
    """An operator serving the Run API, registered with the API server, once kubectl
    finds the resource."""
    registered = registration.register(cluster, tmp_path / "runs-api")
    try:
        operators.start(**registered.environment())
        wait_for(
            lambda: (
                "runs"
                in cluster.kubectl(
                    "api-resources", "--api-group=runs.pgsched.dev", "-o", "name", check=False
                ).stdout
            ),
            60,
            describe="the API server to serve runs.pgsched.dev",
        )
        yield registered
    finally:
        registration.unregister(cluster)


@pytest.fixture
def alice(cluster, tmp_path):
    """A reader of team-a's runs (a name of her own: the module's cluster outlives tests)."""
    return user(cluster, "team-a", f"alice-{secrets.token_hex(3)}", READ_RUNS, tmp_path)


def names_in(output: str) -> list[str]:
    """The NAME column of kubectl's table (the first, or the second with -A)."""
    lines = output.strip().splitlines()
    column = 1 if lines and lines[0].startswith("NAMESPACE") else 0
    return [line.split()[column] for line in lines[1:]]


def test_kubectl_get_runs_shows_a_user_only_the_namespaces_they_may_list(
    cluster, history, served, alice
):
    mine = kubectl_as(cluster, alice, "get", "runs", "-n", "team-a")
    assert mine.returncode == 0, mine.stderr
    assert names_in(mine.stdout) == history["team-a"]
    header = mine.stdout.splitlines()[0].split()
    assert header[:6] == ["NAME", "SCHEDULEDJOB", "STATUS", "REASON", "TRIGGER", "ATTEMPT"]
    failed_line = next(line for line in mine.stdout.splitlines() if "FAILED" in line)
    assert "NonZeroExit" in failed_line and "manual" in failed_line

    theirs = kubectl_as(cluster, alice, "get", "runs", "-n", "team-b")
    assert theirs.returncode != 0 and "forbidden" in theirs.stderr
    assert not set(history["team-b"]) & set(names_in(theirs.stdout))
    one = kubectl_as(cluster, alice, "get", "run", history["team-b"][0], "-n", "team-b")
    assert one.returncode != 0 and "forbidden" in one.stderr

    everywhere = kubectl_as(cluster, alice, "get", "runs", "-A")
    assert not set(history["team-b"]) & set(names_in(everywhere.stdout))

    admin = cluster.kubectl("get", "runs", "-A").stdout
    assert set(names_in(admin)) == set(history["team-a"] + history["team-b"])


def test_selectors_pages_and_formats_work_as_for_any_kind(cluster, history, served):
    failed = cluster.kubectl(
        "get", "runs", "-n", "team-a", "--field-selector", "status.phase=FAILED"
    ).stdout
    assert names_in(failed) == history["team-a"][:2]  # the two newest failed
    of_job = cluster.kubectl("get", "runs", "-A", "-l", "pgsched.dev/scheduledjob=export").stdout
    assert names_in(of_job) == history["team-b"]
    paged = cluster.kubectl("get", "runs", "-n", "team-a", "--chunk-size=2").stdout
    assert names_in(paged) == history["team-a"]  # three pages, nothing lost or repeated
    oldest_first = cluster.kubectl("get", "runs", "-n", "team-a", "--sort-by=.status.id").stdout
    assert names_in(oldest_first) == history["team-a"][::-1]  # kubectl sorts the objects
    wide = cluster.kubectl("get", "runs", "-n", "team-a", "-o", "wide").stdout
    assert "EXIT CODE" in wide.splitlines()[0] and "JOB" in wide.splitlines()[0]

    newest = history["team-a"][0]
    found = json.loads(cluster.kubectl("get", "run", newest, "-n", "team-a", "-o", "json").stdout)
    assert found["kind"] == "Run" and found["metadata"]["name"] == newest
    assert found["spec"]["scheduledJob"] == "nightly"
    assert found["status"]["phase"] == "FAILED" and found["status"]["reason"] == "NonZeroExit"
    assert found["status"]["finishedAt"].endswith("Z")
    assert "leaseToken" not in json.dumps(found)

    missing = cluster.kubectl("get", "run", "nightly-999999", "-n", "team-a", check=False)
    assert missing.returncode != 0 and 'runs.runs.pgsched.dev "nightly-999999" not found' in (
        missing.stderr
    )
    wrong = cluster.kubectl(
        "get", "runs", "-n", "team-a", "--field-selector", "status.color=red", check=False
    )
    assert wrong.returncode != 0
    assert "status.color=red" in wrong.stderr and "status.phase=FAILED" in wrong.stderr


def test_kubectl_explain_run_describes_a_run_and_its_fields(cluster, served):
    # The aggregator fetches an APIService's OpenAPI when it registers it and again when
    # the document's hash changes, so the first explain may come before it has.
    explained = wait_for(
        lambda: (
            found.stdout
            if (found := cluster.kubectl("explain", "run", check=False)).returncode == 0
            else None
        ),
        120,
        describe=lambda: (
            "kubectl explain run to find the Run's schema: "
            + cluster.kubectl("explain", "run", check=False).stderr
            + " /openapi/v3 paths: "
            + ", ".join(json.loads(cluster.kubectl("get", "--raw", "/openapi/v3").stdout)["paths"])
        ),
    )
    assert "KIND:       Run" in explained and "VERSION:    v1alpha1" in explained
    assert "One run of a ScheduledJob" in explained
    phase = cluster.kubectl("explain", "run.status.phase").stdout
    assert "QUEUED (waiting to be claimed)" in phase
    spec = cluster.kubectl("explain", "run.spec", "--recursive").stdout
    assert "scheduledJob" in spec and "parameters" in spec


# -- create = run now, delete = cancel ---------------------------------------------------

RUN_AND_CANCEL = [
    {
        "apiGroups": ["runs.pgsched.dev"],
        "resources": ["runs"],
        "verbs": ["get", "list", "create", "delete"],
    }
]


def run_manifest(name: str, scheduled_job: str, **parameters: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "runs.pgsched.dev/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name},
            "spec": {"scheduledJob": scheduled_job, "parameters": parameters},
        }
    )


def kubectl_with(cluster, who, *args: str, input: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.binaries.kubectl), "--kubeconfig", str(who.kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def define_report(conn) -> None:
    """team-a's report, with a region parameter (eu or us)."""
    define(
        conn,
        "report",
        namespace="team-a",
        schedule=NEVER_DUE,
        now=T0,
        parameters=[{"name": "region", "pattern": "eu|us", "default": "eu"}],
        jobTemplate=busybox("sleep 600"),  # no node here: launched, it waits for one
    )


def test_creating_a_run_queues_one_per_name_and_deleting_it_cancels_it(
    cluster, conn, served, tmp_path
):
    define_report(conn)
    dave = user(cluster, "team-a", f"dave-{secrets.token_hex(3)}", RUN_AND_CANCEL, tmp_path)
    manifest = run_manifest("report-us", "report", region="us")
    tried = kubectl_with(cluster, dave, "create", "--dry-run=server", "-f", "-", input=manifest)
    assert tried.returncode == 0 and "created (server dry run)" in tried.stdout, tried
    for _ in range(2):
        created = kubectl_with(cluster, dave, "create", "-f", "-", input=manifest)
        assert created.returncode == 0, created.stderr
    tokens = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE request_token = %s",
        ["runs.pgsched.dev/report-us"],
    ).fetchone()
    assert tokens["n"] == 1  # the same name twice: one run

    run = json.loads(kubectl_as(cluster, dave, "get", "run", "report-us", "-o", "json").stdout)
    assert run["spec"] == {"scheduledJob": "report", "parameters": {"region": "us"}}
    assert run["status"]["trigger"] == "manual"
    assert run["status"]["requestedBy"] == dave.name

    bad = kubectl_with(
        cluster,
        dave,
        "create",
        "-f",
        "-",
        input=run_manifest("report-mars", "report", region="mars"),
    )
    assert bad.returncode != 0
    assert 'The Run "report-mars" is invalid: spec.parameters.region:' in bad.stderr
    assert "does not match the pattern" in bad.stderr and "region: eu" in bad.stderr
    typo = yaml.safe_load(run_manifest("report-typo", "report"))
    typo["spec"]["shedule"] = "now"
    strict = kubectl_with(cluster, dave, "create", "-f", "-", input=yaml.safe_dump(typo))
    assert strict.returncode != 0 and "unknown field 'spec.shedule'" in strict.stderr, strict
    ids = kubectl_with(cluster, dave, "create", "-f", "-", input=run_manifest("report-7", "report"))
    assert ids.returncode != 0 and "report-manual" in ids.stderr  # names by id are the runs'

    tried = kubectl_as(cluster, dave, "delete", "run", "report-us", "--dry-run=server")
    assert tried.returncode == 0, tried.stderr
    still = json.loads(kubectl_as(cluster, dave, "get", "run", "report-us", "-o", "json").stdout)
    assert not still["status"]["cancelRequested"] and still["status"]["phase"] != "CANCELLED"
    deleted = kubectl_as(cluster, dave, "delete", "run", "report-us")
    assert deleted.returncode == 0, deleted.stderr
    after = json.loads(kubectl_as(cluster, dave, "get", "run", "report-us", "-o", "json").stdout)
    assert after["status"]["phase"] == "CANCELLED" or after["status"]["cancelRequested"]
    assert after["status"]["cancelledBy"] == f"RunAPI ({dave.name})"


def test_a_user_who_may_only_read_runs_can_neither_create_nor_delete_one(
    cluster, conn, history, served, alice
):
    define(conn, "report", namespace="team-a", schedule=NEVER_DUE, now=T0)
    created = kubectl_with(
        cluster, alice, "create", "-f", "-", input=run_manifest("report-now", "report")
    )
    assert created.returncode != 0 and "forbidden" in created.stderr
    deleted = kubectl_as(cluster, alice, "delete", "run", history["team-a"][0], "-n", "team-a")
    assert deleted.returncode != 0 and "forbidden" in deleted.stderr
    tokens = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE request_token IS NOT NULL"
        " AND request_token LIKE 'runs.pgsched.dev/%%'"
    ).fetchone()
    assert tokens["n"] == 0


# -- straight to the server, past the API server -----------------------------------------


def direct(
    served: registration.RunsApi, path: str, *, client: pki.KeyPair | None, **headers: str
) -> tuple[int, dict[str, Any]]:
    """GET ``path`` from the Run API itself, presenting ``client``'s certificate (or none)."""
    context = ssl.create_default_context(cafile=str(served.cert_dir / "ca.crt"))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    connection = http.client.HTTPSConnection(
        served.address, served.port, context=context, timeout=10
    )
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


RUNS = "/apis/runs.pgsched.dev/v1alpha1/namespaces/team-a/runs"
AS_ADMIN = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}


def test_user_headers_are_believed_only_from_the_api_servers_front_proxy(
    cluster, history, served, tmp_path
):
    keys = cluster.certificates
    # The front proxy's own connection: what the API server sends (the control case).
    status, body = direct(served, RUNS, client=keys.front_proxy_client, **AS_ADMIN)
    assert (
        status == 200
        and [item["metadata"]["name"] for item in body["items"]] == (history["team-a"])
    )
    # No certificate: anyone who reaches the port could write these headers.
    status, body = direct(served, RUNS, client=None, **AS_ADMIN)
    assert status == 401 and "no client certificate" in body["message"]
    assert "items" not in body
    # A certificate of the same CA that is not the front proxy's (an admin's).
    status, body = direct(served, RUNS, client=keys.admin, **AS_ADMIN)
    assert status == 401 and "not the front proxy's" in body["message"]
    # A certificate of another CA fails the handshake.
    stranger_dir = pki.serving_tls(tmp_path / "stranger", ips=["127.0.0.1"], ca_name="stranger")
    stranger = pki.KeyPair(stranger_dir / "tls.crt", stranger_dir / "tls.key")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        direct(served, RUNS, client=stranger, **AS_ADMIN)
    # The front proxy's connection naming a user RBAC does not allow: refused by this
    # server's own review, in the API server's words.
    status, body = direct(
        served, RUNS, client=keys.front_proxy_client, **{"X-Remote-User": "mallory"}
    )
    assert status == 403
    assert body["message"] == (
        'runs.runs.pgsched.dev is forbidden: User "mallory" cannot list resource "runs"'
        ' in API group "runs.pgsched.dev" in the namespace "team-a"'
    )


# -- availability ------------------------------------------------------------------------


def available(cluster) -> str:
    found = cluster.api.get(
        f"/apis/apiregistration.k8s.io/v1/apiservices/{registration.APISERVICE}"
    )
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Available"), "Unknown")


def namespace_phase(cluster, name: str) -> str | None:
    try:
        return str(cluster.api.get(f"/api/v1/namespaces/{name}")["status"]["phase"])
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def test_namespace_deletion_waits_while_the_run_api_is_down_and_ends_once_it_is_back(
    cluster, operators, served
):
    """What docs/runs-api.md says of an outage: with the Run API up a namespace is
    deleted at once; with every replica down it stays Terminating (the namespace
    controller cannot discover what it holds), and it goes once a replica is back."""
    create_namespace(cluster, "goes-at-once")
    cluster.api.delete("/api/v1/namespaces/goes-at-once")
    wait_for(lambda: namespace_phase(cluster, "goes-at-once") is None, 60, describe="deleted")

    operators.stop_all()
    wait_for(lambda: available(cluster) == "False", 90, describe="the APIService unavailable")
    create_namespace(cluster, "waits")
    cluster.api.delete("/api/v1/namespaces/waits")
    time.sleep(10)
    assert namespace_phase(cluster, "waits") == "Terminating"
    conditions = cluster.api.get("/api/v1/namespaces/waits")["status"].get("conditions") or []
    assert any(
        c["type"] == "NamespaceDeletionDiscoveryFailure" and c["status"] == "True"
        for c in conditions
    ), conditions

    operators.start(**served.environment())
    wait_for(lambda: namespace_phase(cluster, "waits") is None, 180, describe="deleted at last")


# -- watch -------------------------------------------------------------------------------

WATCH_RUNS = [
    {"apiGroups": ["runs.pgsched.dev"], "resources": ["runs"], "verbs": ["get", "list", "watch"]}
]


class Watcher:
    """``kubectl get runs -w --output-watch-events`` as a user; each line with when it came."""

    def __init__(self, cluster: ControlPlane, who: Any, namespace: str) -> None:
        self.lines: list[tuple[float, list[str]]] = []
        self._process = subprocess.Popen(
            [str(cluster.binaries.kubectl), "--kubeconfig", str(who.kubeconfig), "get", "runs",
             "-n", namespace, "-w", "--output-watch-events"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append((time.monotonic(), line.split()))

    def seen(self, name: str, status: str) -> float | None:
        """When the line saying ``name`` is ``status`` came (EVENT NAME SCHEDULEDJOB STATUS)."""
        for at, cells in self.lines:
            if cells[1:2] == [name] and cells[3:4] == [status]:
                return at
        return None

    def statuses(self, name: str) -> list[str]:
        return [cells[3] for _, cells in self.lines if cells[1:2] == [name] and len(cells) > 3]

    def stop(self) -> None:
        self._process.kill()
        self._process.wait(10)


def finish(conn, run_id: int, status: str) -> float:
    """End a claimed run as its pod would; when the end was committed."""
    row = conn.execute(
        "SELECT lease_token FROM pgsched.job_runs WHERE id = %s", [run_id]
    ).fetchone()
    assert lease.finish(conn, lease.Lease(run_id, row["lease_token"]), status)
    return time.monotonic()


def run_id(cluster: ControlPlane, name: str, namespace: str) -> int:
    found = json.loads(cluster.kubectl("get", "run", name, "-n", namespace, "-o", "json").stdout)
    return int(found["status"]["id"])


def apply_scheduled_job(cluster, conn, namespace: str, name: str, **spec: Any) -> None:
    """A ScheduledJob applied for real (its Jobs are owned by it: one only in the database
    would have them garbage-collected), once the operator has stored it."""
    manifest = {
        "apiVersion": "pgsched.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": NEVER_DUE, "jobTemplate": busybox("sleep 600"), **spec},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    wait_for(
        lambda: conn.execute(
            "SELECT 1 FROM pgsched.job_definitions WHERE namespace = %s AND name = %s",
            [namespace, name],
        ).fetchone(),
        60,
        describe=f"the operator to store ScheduledJob {namespace}/{name}",
    )


def create_run(cluster: ControlPlane, namespace: str, name: str, scheduled_job: str) -> int:
    """``kubectl create`` a Run; its run id, once the operator has claimed it."""
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=run_manifest(name, scheduled_job))
    return run_id(cluster, name, namespace)


def claimed(conn, run: int) -> None:
    wait_for(
        lambda: (
            conn.execute("SELECT status FROM pgsched.job_runs WHERE id = %s", [run]).fetchone()[
                "status"
            ]
            == "RUNNING"
        ),
        30,
        describe=f"run {run} to be claimed",
    )


def raw_watch(cluster: ControlPlane, base: str, version: str, query: str = "") -> list[Any]:
    """The events of a 3-second raw watch of ``base`` from ``version`` (``query``: more
    parameters, each starting with ``&``)."""
    answer = cluster.kubectl(
        "get", "--raw", f"{base}?watch=1&resourceVersion={version}&timeoutSeconds=3{query}"
    ).stdout
    return [json.loads(line) for line in answer.splitlines() if line.strip()]


def kinds_and_phases(events: list[Any], name: str) -> list[tuple[str, str]]:
    """Each event of the Run ``name``: its type and the phase it carries."""
    return [
        (event["type"], event["object"]["status"]["phase"])
        for event in events
        if event["object"]["metadata"]["name"] == name
    ]


def test_kubectl_get_runs_w_follows_each_change_and_a_resumed_watch_misses_nothing(
    cluster, conn, namespace, served, tmp_path
):
    # The first run stays RUNNING beside the others (no node here: launched, it waits).
    apply_scheduled_job(cluster, conn, namespace, "watched", maxConcurrentRuns=5)
    wendy = user(cluster, namespace, f"wendy-{secrets.token_hex(3)}", WATCH_RUNS, tmp_path)
    watcher = Watcher(cluster, wendy, namespace)
    try:
        # kubectl lists, then watches from the list's version: once a run created now is
        # shown, the watch is live.
        def live() -> float | None:
            if not watcher.statuses("watched-first"):
                create_run(cluster, namespace, "watched-first", "watched")
            return watcher.seen("watched-first", "RUNNING")

        wait_for(live, 60, describe=lambda: f"the watch to be live: {watcher.lines}")
        ran = create_run(cluster, namespace, "watched-now", "watched")
        claimed(conn, ran)
        ended = finish(conn, ran, "COMPLETED")
        shown = wait_for(lambda: watcher.seen("watched-now", "COMPLETED"), 30,
                         describe=lambda: f"COMPLETED in the watch: {watcher.lines}")  # fmt: skip
        # Each change once, in its order (the operator claims a queued run within a tick:
        # QUEUED and RUNNING may be read together, and each is still shown).
        assert watcher.statuses("watched-now") == ["QUEUED", "RUNNING", "COMPLETED"], watcher.lines
        print(f"COMPLETED shown {shown - ended:.2f}s after its commit")
        assert shown - ended < 5.0  # a latency bound, not a benchmark: 1 s is typical
    finally:
        watcher.stop()

    # Resuming: what changed while nobody watched comes from the last version seen.
    base = f"/apis/runs.pgsched.dev/v1alpha1/namespaces/{namespace}/runs"
    listed = json.loads(cluster.kubectl("get", "--raw", f"{base}?limit=1").stdout)
    version = listed["metadata"]["resourceVersion"]
    assert version.isdigit(), listed
    later = create_run(cluster, namespace, "watched-later", "watched")
    claimed(conn, later)
    finish(conn, later, "FAILED")
    events = raw_watch(cluster, base, version)
    of_later = kinds_and_phases(events, "watched-later")
    # Each change in order; the failure's settling (retryDecision) is one more MODIFIED.
    phases = [phase for index, (_, phase) in enumerate(of_later)
              if index == 0 or of_later[index - 1][1] != phase]  # fmt: skip
    assert phases == ["QUEUED", "RUNNING", "FAILED"], of_later
    assert [kind for kind, _ in of_later] == ["ADDED"] + ["MODIFIED"] * (len(of_later) - 1)
    assert all(event["object"]["metadata"]["name"] != "watched-now" for event in events)
    # Watched by phase, a run enters RUNNING (ADDED) and leaves it (DELETED, as it was), as
    # the API server does for an object that starts or stops matching a field selector.
    by_phase = raw_watch(cluster, base, version, "&fieldSelector=status.phase%3DRUNNING")
    seen = kinds_and_phases(by_phase, "watched-later")
    # Between the two, a note while it ran (its launch) is a MODIFIED in the phase.
    assert seen[:1] == [("ADDED", "RUNNING")] and seen[-1:] == [("DELETED", "RUNNING")], seen
    assert all(item == ("MODIFIED", "RUNNING") for item in seen[1:-1]), seen

    # A reader who may list but not watch is refused the watch.
    reader = user(cluster, namespace, f"rita-{secrets.token_hex(3)}", READ_RUNS, tmp_path)
    refused = kubectl_as(cluster, reader, "get", "runs", "-n", namespace, "-w",
                         "--request-timeout=20s")  # fmt: skip
    assert refused.returncode != 0
    assert 'cannot watch resource "runs"' in refused.stderr, refused.stderr

    # Older than the changes kept: 410, and the client lists again.
    changes.prune(conn, keep_seconds=0)
    expired = cluster.kubectl(
        "get", "--raw", f"{base}?watch=1&resourceVersion={version}&timeoutSeconds=3", check=False
    )
    assert expired.returncode != 0
    assert f"too old resource version: {version}" in expired.stderr, expired.stderr


# -- the CLI through the Run API ---------------------------------------------------------

READ_RUNS_AND_JOBS = [
    *READ_RUNS,
    {"apiGroups": ["pgsched.dev"], "resources": ["scheduledjobs"], "verbs": ["get"]},
]


def test_pgsched_runs_reads_through_the_run_api_as_a_tenant_without_a_database(
    cluster, conn, operators, namespace, served, tmp_path
):
    apply_scheduled_job(cluster, conn, namespace, "ledger", timeZone="Europe/Paris")
    for name, status in (("ledger-a", "COMPLETED"), ("ledger-b", "FAILED")):
        ran = create_run(cluster, namespace, name, "ledger")
        claimed(conn, ran)
        finish(conn, ran, status)
    tess = user(cluster, namespace, f"tess-{secrets.token_hex(3)}", READ_RUNS_AND_JOBS, tmp_path)

    remote = as_user(tess, "runs", "ledger", "-n", namespace, "-o", "json")
    assert remote.code == 0, remote.err
    local = pgsched("runs", "ledger", "-n", namespace, "-o", "json", dsn=operators.dsn)
    assert local.code == 0, local.err
    same = ("id", "status", "reason", "attempt", "trigger", "exitCode", "cancelRequested")
    assert [{key: run[key] for key in same} for run in remote.json()["runs"]] == [
        {key: run[key] for key in same} for run in local.json()["runs"]
    ]
    assert [run["status"] for run in remote.json()["runs"]] == ["FAILED", "COMPLETED"]
    assert remote.json()["timeZone"] == "Europe/Paris"
    table = as_user(tess, "runs", "ledger", "-n", namespace)
    assert table.code == 0, table.err
    header = table.out.splitlines()[0].split()
    assert header[:5] == ["ID", "STATUS", "REASON", "ATTEMPT", "TRIGGER"], table.out

    # Another team's runs: the API server says no, and the CLI says what is missing.
    theirs = as_user(tess, "runs", "ledger", "-n", "team-b")
    assert theirs.code != 0
    assert "your kubeconfig's user may not get scheduledjobs in team-b" in theirs.err, theirs.err

    # describe: the same lines and the same JSON as from the database.
    failed = remote.json()["runs"][0]["id"]
    for form in ([], ["-o", "json"]):
        told = as_user(tess, "describe", str(failed), "-n", namespace, *form)
        assert told.code == 0, told.err
        direct = pgsched("describe", str(failed), *form, dsn=operators.dsn)
        assert direct.code == 0, direct.err
        assert told.out == direct.out
    assert told.json()["run"]["status"] == "FAILED", told.out  # the last form: JSON
    elsewhere = as_user(tess, "describe", str(failed), "-n", "team-b")
    assert elsewhere.code != 0
    assert "your kubeconfig's user may not list runs in team-b" in elsewhere.err, elsewhere.err
    missing = as_user(tess, "describe", str(failed + 100000), "-n", namespace)
    assert missing.code != 0
    assert f"no run with id {failed + 100000} in namespace {namespace}" in missing.err


# -- pgsched run-now and cancel through the Run API ------------------------------------


def test_pgsched_run_now_and_cancel_via_the_run_api_need_only_create_and_delete_runs(
    cluster, conn, served, tmp_path, alice
):
    """A CI's account that may create and delete runs, and not patch (edit) the job, starts
    and cancels runs with the CLI, answered at once, one run per token."""
    define_report(conn)
    other = define(conn, "other", namespace="team-a", schedule=NEVER_DUE, now=T0)
    erin = user(cluster, "team-a", f"erin-{secrets.token_hex(3)}", RUN_AND_CANCEL, tmp_path)

    # The annotation path needs patch on the ScheduledJob: refused, nothing queued.
    annotated = as_user(erin, "run-now", "report", "-n", "team-a", "--timeout", "5")
    assert annotated.code != 0, annotated.out

    via = ("-n", "team-a", "--via", "runs-api")
    first = as_user(erin, "run-now", "report", *via, "--token", "deploy-42", "--param",
                    "region=us", "-o", "json")  # fmt: skip
    assert first.code == 0, first.err
    queued = first.json()
    assert queued["created"] is True and queued["run"] == "deploy-42", queued
    assert queued["requestedBy"] == erin.name and queued["via"] == "runs-api"
    again = as_user(erin, "run-now", "report", *via, "--token", "deploy-42")
    assert again.code == 0, again.err
    assert f"Run deploy-42 exists already: run {queued['id']} of team-a/report" in again.out
    assert "nothing new queued" in again.out
    tokens = conn.execute(
        "SELECT count(*) AS n FROM pgsched.job_runs WHERE request_token = %s",
        ["runs.pgsched.dev/deploy-42"],
    ).fetchone()
    assert tokens["n"] == 1
    fresh = as_user(erin, "run-now", "report", *via)
    assert fresh.code == 0 and "queued as Run report-" in fresh.out, fresh

    bad = as_user(erin, "run-now", "report", *via, "--param", "region=mars")
    assert bad.code == 2, bad
    assert "spec.parameters.region" in bad.err and "does not match the pattern" in bad.err
    badname = as_user(erin, "run-now", "report", *via, "--token", "Deploy 42")
    assert badname.code == 2 and "metadata.name" in badname.err, badname

    cancelled = as_user(erin, "cancel", "report", str(queued["id"]), *via)
    assert cancelled.code == 0, cancelled.err
    assert f"run {queued['id']}:" in cancelled.out
    assert "now CANCELLED" in cancelled.out or "asked to stop" in cancelled.out, cancelled.out
    by = conn.execute(
        "SELECT cancelled_by FROM pgsched.job_runs WHERE id = %s", [queued["id"]]
    ).fetchone()
    assert by["cancelled_by"] == f"RunAPI ({erin.name})"
    twice = as_user(erin, "cancel", "report", str(queued["id"]), *via)
    assert twice.code == 0, twice.err
    assert "nothing to cancel" in twice.out or "already requested" in twice.out, twice.out

    # Queued, not claimed here: the operator serving the Run API dispatches it meanwhile.
    theirs = runs.run_now(conn, other.id, token="theirs", scheduled_for=T0).run
    wrong = as_user(erin, "cancel", "report", str(theirs.id), *via)
    assert wrong.code == 1 and f"run {theirs.id} is not a run of report" in wrong.err, wrong
    every = as_user(erin, "cancel", "report", "--all", *via)
    assert every.code == 2 and "--all goes through the annotation" in every.err, every
    both = as_user(erin, "run-now", "report", *via, "--database")
    assert both.code == 2 and "give one" in both.err, both

    # A reader may neither: the CLI says which permission is missing.
    reader = as_user(alice, "run-now", "report", *via)
    assert reader.code == 1 and "may not create runs in team-a" in reader.err, reader
    stopped = as_user(alice, "cancel", "other", str(theirs.id), *via)
    assert stopped.code == 1 and "may not delete runs in team-a" in stopped.err, stopped
