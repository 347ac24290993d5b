"""A hostile visitor against the UI, on the real API server (issue 25, findings 6 and 9):
what the sign-in cookie may hold, which tokens are accepted, what a run id reveals, what
a reader of ScheduledJobs sees of Jobs and pods, how much log one page pulls, and what
guessing tokens costs. docs/security-ui.md lists each "must never" with its test here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import (
    READ_JOBS,
    Answer,
    Certificate,
    Served,
    Tenants,
    grant,
    serve,
    token_for,
    ui_client,
)
from devenv.controlplane import ControlPlane
from devenv.waiting import wait_for
from pgsched import names
from pgsched.db import connection
from pgsched.k8s import names as kube_names
from pgsched.k8s.client import api
from pgsched.ui import access, run_page, server
from plugins.cluster import container, job_manifest

pytestmark = pytest.mark.cluster

SESSION = "pgsched_session"
CSRF = "pgsched_csrf"
PER_CLIENT_LIMIT = 10  # failed sign-ins from one address per minute (pgsched.ui.throttle)


def cookie_value(line: str) -> str:
    return line.split(";", 1)[0].split("=", 1)[1].strip('"')


def attributes(line: str) -> dict[str, str]:
    """A Set-Cookie line's attributes, lower-cased names (flags map to "")."""
    found = {}
    for part in line.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        found[name.lower()] = value
    return found


def sign_in(ui: Served, token: str, headers: dict[str, str] | None = None) -> Answer:
    """What a browser does: open the sign-in form, then post it with the token."""
    form_page = ui.request("GET", "/login", headers=headers)
    csrf_line = form_page.set_cookies().get(CSRF)
    csrf = cookie_value(csrf_line) if csrf_line else ""
    return ui.request(
        "POST",
        "/login",
        form={"token": token, "csrf": csrf},
        cookies={CSRF: csrf} if csrf else None,
        headers=headers,
    )


def test_the_session_cookie_holds_a_random_id_never_the_token_and_has_its_flags(
    cluster: ControlPlane,
    token_ui: Served,
    tenants: tuple[Tenants, str],
    dsn: str,
    certificate: Certificate,
    tmp_path: Path,
) -> None:
    found, ui_token = tenants
    answer = sign_in(token_ui, found.viewer)
    assert answer.status == 303
    assert found.viewer not in str(answer.headers)  # nowhere in the answer, cookie included
    line = answer.set_cookies()[SESSION]
    session = cookie_value(line)
    assert len(session) >= 43  # 256 random bits, base64url
    flags = attributes(line)
    assert "httponly" in flags and flags["samesite"] == "Lax" and flags["path"] == "/"
    assert flags["max-age"] == str(8 * 3600)
    assert "secure" not in flags  # plain HTTP to a loopback address: kubectl port-forward

    page = token_ui.request("GET", "/", cookies={SESSION: session})
    assert page.status == 200 and f"/ns/{found.alpha}/report" in page.body
    assert found.viewer not in page.body

    # Behind a TLS proxy, or on the UI's own TLS listener, the cookie is Secure; over plain
    # HTTP to another machine there is no sign-in at all (the cookie would travel in clear).
    proxied = sign_in(token_ui, found.viewer, {"X-Forwarded-Proto": "https"})
    assert "secure" in attributes(proxied.set_cookies()[SESSION])
    remote = sign_in(token_ui, found.viewer, {"Host": "ui.example.com"})
    assert remote.status == 403 and "plain HTTP is refused" in remote.body
    assert SESSION not in remote.set_cookies()
    tls = server.tls_context(str(certificate.cert), str(certificate.key))
    kube = ui_client(cluster, ui_token, tmp_path)
    for https in serve(
        dsn,
        access.TokenAccess(kube, audience=names.UI_AUDIENCE),
        tls=tls,
        trust=certificate.trust(),
    ):
        assert "secure" in attributes(sign_in(https, found.viewer).set_cookies()[SESSION])

    # Login CSRF: a sign-in posted without the form's token opens no session.
    forged = token_ui.request("POST", "/login", form={"token": found.viewer})
    assert forged.status == 403 and SESSION not in forged.set_cookies()

    # Sign-out only with the page's own token; then the session is gone on the server too.
    guessed = token_ui.request("POST", "/logout", cookies={SESSION: session}, form={"csrf": "x"})
    assert guessed.status == 403
    assert token_ui.request("GET", "/", cookies={SESSION: session}).status == 200
    match = re.search(r"name='csrf' value='([^']+)'", page.body)
    assert match is not None
    out = token_ui.request(
        "POST", "/logout", cookies={SESSION: session}, form={"csrf": match.group(1)}
    )
    assert out.status == 303 and attributes(out.set_cookies()[SESSION])["max-age"] == "0"
    assert token_ui.request("GET", "/", cookies={SESSION: session}).status == 401


def test_a_token_for_the_api_servers_audience_is_refused(
    cluster: ControlPlane,
    token_ui: Served,
    tenants: tuple[Tenants, str],
    dsn: str,
    tmp_path: Path,
) -> None:
    found, ui_token = tenants
    # The viewer's token for the API server itself: what a visitor must never hand the UI.
    api_token = token_for(cluster, found.alpha, "viewer", audience=None)
    assert token_ui.get("/", token=api_token)[0] == 401
    refused = sign_in(token_ui, api_token)
    assert refused.status == 401 and SESSION not in refused.set_cookies()
    assert "--audience pgsched-ui" in refused.body  # says how to get the right one
    other = token_for(cluster, found.alpha, "viewer", audience="someone-else")
    assert token_ui.get("/", token=other)[0] == 401
    assert token_ui.get("/", token=found.viewer)[0] == 200  # issued for pgsched-ui

    # The documented opt-in (ui.apiServerTokens) takes the API server's tokens instead.
    kube = ui_client(cluster, ui_token, tmp_path)
    for legacy in serve(dsn, access.TokenAccess(kube, audience=None)):
        assert legacy.get("/", token=api_token)[0] == 200
        assert legacy.get("/", token=found.viewer)[0] == 401


def test_an_unknown_run_and_another_tenants_run_get_the_same_answer_byte_for_byte(
    token_ui: Served, tenants: tuple[Tenants, str], conn: connection.Connection
) -> None:
    found, _ = tenants
    foreign = found.beta_history.ids["failed"]
    row = conn.execute("SELECT max(id) + 1000 AS id FROM pgsched.job_runs").fetchone()
    assert row is not None
    unknown = row["id"]

    def same_answer(**credentials: object) -> None:
        one = token_ui.request("GET", f"/runs/{foreign}", **credentials)  # type: ignore[arg-type]
        other = token_ui.request("GET", f"/runs/{unknown}", **credentials)  # type: ignore[arg-type]
        assert one.status == other.status == 404
        assert one.body == other.body
        assert "payroll" not in one.body and found.beta not in one.body

    same_answer(token=found.viewer)
    # Signed in, with the sign-out button (and its token) in the header, too.
    same_answer(
        cookies={SESSION: cookie_value(sign_in(token_ui, found.viewer).set_cookies()[SESSION])}
    )
    # In a namespace the visitor may not read, a job that exists and one that does not.
    one = token_ui.request("GET", f"/ns/{found.beta}/payroll", token=found.viewer)
    other = token_ui.request("GET", f"/ns/{found.beta}/no-such-job", token=found.viewer)
    assert one.status == other.status == 403
    assert one.body.replace("payroll", "no-such-job") == other.body


def test_a_huge_pod_log_is_read_at_most_log_bytes(
    cluster: ControlPlane, token_ui: Served, tenants: tuple[Tenants, str]
) -> None:
    found, _ = tenants
    grant(cluster, found.alpha, "viewer-reads", READ_JOBS, (found.alpha, "viewer"))
    run_id = found.alpha_history.ids["failed"]
    # 150 lines of 2,000 characters: 300 kB, all within the last LOG_LINES lines.
    script = (
        "i=0; while [ $i -lt 150 ]; do head -c 2000 /dev/zero | tr '\\0' x; echo; i=$((i+1)); done"
    )
    job = job_manifest("report-a1", container("main", "busybox:1.36", "sh", "-c", script))
    job["spec"]["template"]["metadata"] = {"labels": {kube_names.LABEL_RUN_ID: str(run_id)}}  # type: ignore[index]
    cluster.api.create(f"/apis/batch/v1/namespaces/{found.alpha}/jobs", job)

    def logged() -> str | None:
        status, page = token_ui.get(f"/runs/{run_id}", token=found.viewer)
        if (
            status != 200
            or 'id="pods"' not in page
            or "Succeeded" not in page.split('id="pods"')[1]
        ):
            return None
        return page if "<pre id='log'>" in page else None

    page = wait_for(logged, 90, describe="the run page showing the finished pod's log")
    log = page.split("<pre id='log'>")[1].split("</pre>")[0]
    assert 2000 < len(log) <= run_page.LOG_BYTES and set(log) <= {"x", "\n"}
    assert "Cut at 64 KiB" in page


class CountingReviews(api.KubeApi):
    """The UI's API client, counting the TokenReviews the UI sends (the test's wrapper)."""

    reviews = 0

    def create(self, path: str, body: api.Obj) -> api.Obj:
        if path == access.AUTHENTICATION:
            self.reviews += 1
        return super().create(path, body)


def test_the_sign_in_after_too_many_failures_gets_429_and_sends_no_token_review(
    cluster: ControlPlane, dsn: str, tenants: tuple[Tenants, str], tmp_path: Path
) -> None:
    found, ui_token = tenants
    kube = ui_client(cluster, ui_token, tmp_path, CountingReviews)
    assert isinstance(kube, CountingReviews)
    for ui in serve(dsn, access.TokenAccess(kube, audience=names.UI_AUDIENCE)):
        for n in range(PER_CLIENT_LIMIT):
            assert sign_in(ui, f"guess-{n}").status == 401
        assert kube.reviews == PER_CLIENT_LIMIT

        refused = sign_in(ui, "guess-again")
        assert refused.status == 429 and "too many failed sign-ins" in refused.body
        assert 0 < int(refused.headers["Retry-After"]) <= 60
        assert ui.request("GET", "/", token="guess-by-header").status == 429
        assert kube.reviews == PER_CLIENT_LIMIT, "no TokenReview while the guesses are refused"
        # The guesses claimed no identity; a token that claims one (a ServiceAccount's JWT)
        # is counted apart: one review, and it is let in. Behind kubectl port-forward
        # everyone has this address, and one visitor's guesses lock no one else out.
        assert ui.get("/", token=found.viewer)[0] == 200
        assert kube.reviews == PER_CLIENT_LIMIT + 1
