"""Fixtures for the web UI: a served UI over a real database, and a seeded history; for the
cluster tier, two tenant namespaces with tokens and the UI's own ServiceAccount.

The history is planted from the test side, as rows the engine writes (a completed run,
a skipped occurrence with its reason, a failed attempt and its retry, a manual run), at
the 09:00 Europe/Sofia occurrences of the last days, relative to the database clock.
"""

from __future__ import annotations

import http.client
import secrets
import ssl
import subprocess
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from devenv import kubeconfig
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from factories import define
from pgsched import names
from pgsched.db import connection
from pgsched.engine.models import Definition
from pgsched.k8s.client import api
from pgsched.ui import access, server

SOFIA = ZoneInfo("Europe/Sofia")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def set_cookies(self) -> dict[str, str]:
        """Each cookie the answer sets, by name: its whole Set-Cookie line."""
        lines = self.headers.get_all("Set-Cookie") or []
        return {line.split("=", 1)[0]: line for line in lines}


@dataclass(frozen=True)
class Served:
    url: str
    tls: ssl.SSLContext | None = None  # trusts the test certificate, for an HTTPS UI

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        cookies: Mapping[str, str] | None = None,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """One request, redirects not followed, as a browser would send it."""
        where = urllib.parse.urlsplit(self.url)
        assert where.hostname is not None and where.port is not None
        connection = (
            http.client.HTTPSConnection(where.hostname, where.port, timeout=30, context=self.tls)
            if self.tls is not None
            else http.client.HTTPConnection(where.hostname, where.port, timeout=30)
        )
        sent = dict(headers or {})
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            return Answer(response.status, response.headers, response.read().decode())
        finally:
            connection.close()

    def get(self, path: str, *, token: str | None = None) -> tuple[int, str]:
        answer = self.request("GET", path, token=token)
        return answer.status, answer.body


def serve(
    dsn: str,
    ui_access: access.Access,
    *,
    tls: ssl.SSLContext | None = None,
    trust: ssl.SSLContext | None = None,
) -> Iterator[Served]:
    pool = server.open_pool(dsn, size=2)
    app = server.build_app(pool, ui_access, workers=2)
    running = server.serve_in_thread(app, "127.0.0.1:0", tls=tls)
    try:
        scheme = "https" if tls is not None else "http"
        yield Served(f"{scheme}://127.0.0.1:{running.port}", trust)
    finally:
        running.stop()
        pool.close()


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files), made by openssl."""

    cert: Path
    key: Path

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    folder = tmp_path_factory.mktemp("ui-tls")
    made = Certificate(folder / "tls.crt", folder / "tls.key")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(made.key), "-out", str(made.cert)),
        ],
        check=True,
        capture_output=True,
    )
    return made


@pytest.fixture
def ui(dsn: str) -> Iterator[Served]:
    """The UI over this test's database, database-only (--no-auth)."""
    yield from serve(dsn, access.OpenAccess())


@dataclass(frozen=True)
class History:
    definition: Definition
    completed: datetime  # the occurrence that ran
    skipped: datetime  # the occurrence skipped (DeadlineMissed)
    retried: datetime  # the occurrence that failed once and was retried
    ids: dict[str, int]


def insert_run(conn: connection.Connection, definition: Definition, **fields: Any) -> int:
    columns = {"definition_id": definition.id, "trigger": "schedule", **fields}
    names = ", ".join(columns)
    values = ", ".join(f"%({key})s" for key in columns)
    row = conn.execute(
        f"INSERT INTO pgsched.job_runs ({names}) VALUES ({values}) RETURNING id",  # type: ignore[arg-type]
        columns,
    ).fetchone()
    assert row is not None
    return int(row["id"])


def seed(
    conn: connection.Connection, *, namespace: str = "team-a", name: str = "report"
) -> History:
    """A daily 09:00 Europe/Sofia job with three days of history."""
    now: datetime = conn.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
    today = now.astimezone(SOFIA).date()
    nine = [
        datetime(day.year, day.month, day.day, 9, 0, tzinfo=SOFIA)
        for day in (today - timedelta(days=n) for n in (3, 2, 1))
    ]
    definition = define(
        conn,
        name,
        namespace=namespace,
        now=now - timedelta(days=10),
        schedule="0 9 * * *",
        timeZone="Europe/Sofia",
    )
    ids: dict[str, int] = {}
    ran, skipped, retried = nine
    minute = timedelta(minutes=1)
    ids["failed"] = insert_run(
        conn,
        definition,
        status="FAILED",
        scheduled_for=retried,
        started_at=retried + minute,
        finished_at=retried + 3 * minute,
        reason="BackoffLimitExceeded",
        error="exit code 3",
        exit_code=3,
        k8s_job_name=f"{name}-a1",
        settled_at=retried + 3 * minute,
    )
    ids["retry"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        trigger="retry",
        scheduled_for=retried,
        attempt=2,
        retry_of=ids["failed"],
        started_at=retried + 5 * minute,
        finished_at=retried + 9 * minute,
        reason="Succeeded",
        k8s_job_name=f"{name}-a2",
        settled_at=retried + 9 * minute,
    )
    ids["skipped"] = insert_run(
        conn,
        definition,
        status="SKIPPED",
        scheduled_for=skipped,
        reason="DeadlineMissed",
        finished_at=skipped + 2 * minute,
    )
    ids["completed"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        scheduled_for=ran,
        started_at=ran + minute,
        finished_at=ran + 20 * minute,
        reason="Succeeded",
        k8s_job_name=f"{name}-c1",
        settled_at=ran + 20 * minute,
    )
    ids["manual"] = insert_run(
        conn,
        definition,
        status="COMPLETED",
        trigger="manual",
        scheduled_for=ran + 3 * 60 * minute,
        request_token="ui-test",
        started_at=ran + 3 * 60 * minute,
        finished_at=ran + 3 * 60 * minute + 2 * minute,
        reason="Succeeded",
        settled_at=ran + 3 * 60 * minute + 2 * minute,
    )
    # What the materializer would have done by now: the next occurrence is tomorrow's.
    upcoming = datetime(today.year, today.month, today.day, 9, 0, tzinfo=SOFIA) + timedelta(days=1)
    conn.execute(
        "UPDATE pgsched.job_definitions SET next_run_at = %s, last_scheduled_for = %s"
        " WHERE id = %s",
        [upcoming, upcoming - timedelta(days=1), definition.id],
    )
    return History(definition, completed=ran, skipped=skipped, retried=retried, ids=ids)


@pytest.fixture
def history(conn: connection.Connection) -> History:
    return seed(conn)


# --- on the real API server (cluster tier): two tenants, their tokens and the UI's own ---

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


def _account(
    cluster: ControlPlane, namespace: str, name: str, *, audience: str | None = names.UI_AUDIENCE
) -> str:
    """A new ServiceAccount, and a token for it: for the UI's audience, as docs/ui.md tells
    visitors to get one, unless ``audience`` is None (the API server's own audience)."""
    _apply(
        cluster,
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    return token_for(cluster, namespace, name, audience=audience)


def token_for(
    cluster: ControlPlane, namespace: str, name: str, *, audience: str | None = names.UI_AUDIENCE
) -> str:
    flags = ["--audience", audience] if audience is not None else []
    return wait_for(
        lambda: cluster.kubectl(
            "create", "token", name, "-n", namespace, "--duration=1h", *flags
        ).stdout.strip(),
        30,
        describe=f"a token for {namespace}/{name}",
    )


def grant(
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
    ui_token = _account(cluster, alpha, "pgsched-ui", audience=None)  # the UI's own
    grant(cluster, None, f"pgsched-ui-{suffix}", UI_RULES, (alpha, "pgsched-ui"))
    grant(cluster, alpha, "pgsched-ui-jobs", READ_JOBS, (alpha, "pgsched-ui"))
    viewer = _account(cluster, alpha, "viewer")
    grant(cluster, alpha, "viewer", READ_SCHEDULED_JOBS, (alpha, "viewer"))
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


def ui_client(
    cluster: ControlPlane, ui_token: str, tmp_path: Path, kind: type[api.KubeApi] = api.KubeApi
) -> api.KubeApi:
    """The UI's own API client, authenticated as its ServiceAccount (``kind``: a test's
    wrapper that counts what the UI asks)."""
    path = kubeconfig.write(
        tmp_path / "ui-kubeconfig",
        server=cluster.server,
        ca_file=cluster.ca_file,
        user="pgsched-ui",
        token=ui_token,
    )
    return kind.from_environment(kubeconfig=str(path))


@pytest.fixture
def token_ui(
    cluster: ControlPlane, dsn: str, tenants: tuple[Tenants, str], tmp_path: Path
) -> Iterator[Served]:
    """The UI as the operator serves it: its own ServiceAccount, the default audience."""
    _, ui_token = tenants
    kube = ui_client(cluster, ui_token, tmp_path)
    # A short cache, so that a Role a test grants bites in seconds (the product's is 30 s).
    yield from serve(dsn, access.TokenAccess(kube, audience=names.UI_AUDIENCE, ttl=2))
