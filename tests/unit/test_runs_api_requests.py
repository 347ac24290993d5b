"""The Run API's reading of a request: who the front proxy says is asking, and the
query's selectors, limit and continue token — each hostile form refused with a message
that names it and shows a right one."""

from __future__ import annotations

import base64

import pytest
from multidict import CIMultiDict

from pgsched.k8s.runs_api import params, resources
from pgsched.k8s.runs_api.frontproxy import FrontProxy, Unauthenticated

PROXY = FrontProxy(
    client_ca="-----BEGIN CERTIFICATE-----",
    allowed_names=("front-proxy-client",),
    username_headers=("X-Remote-User",),
    group_headers=("X-Remote-Group",),
    extra_prefixes=("X-Remote-Extra-",),
)


def certificate(common_name: str) -> dict[str, object]:
    return {"subject": ((("organizationName", "x"),), (("commonName", common_name),))}


def test_only_the_allowed_front_proxy_certificate_is_believed():
    PROXY.proxied(certificate("front-proxy-client"))
    with pytest.raises(Unauthenticated, match="no client certificate"):
        PROXY.proxied(None)
    with pytest.raises(Unauthenticated, match="'admin' is not the front proxy's"):
        PROXY.proxied(certificate("admin"))
    # No allowed names configured: any certificate the front-proxy CA signed (Kubernetes').
    FrontProxy("", (), ("X-Remote-User",), (), ()).proxied(certificate("anyone"))


def test_the_user_its_groups_and_extras_come_from_the_configured_headers():
    headers = CIMultiDict(
        [
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "team-a"),
            ("x-remote-group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "read"),
            ("X-Remote-Extra-Scopes", "write"),
            ("X-Remote-Extra-Acme.com%2Fproject", "42"),
            ("X-Remote-Userx", "mallory"),  # not a configured header
        ]
    )
    user = PROXY.user(headers)
    assert user is not None
    assert user.name == "alice"
    assert user.groups == ("team-a", "system:authenticated")
    assert user.extra == {"scopes": ["read", "write"], "acme.com/project": ["42"]}
    assert PROXY.user(CIMultiDict([("X-Remote-Group", "system:masters")])) is None


@pytest.mark.parametrize(
    ("selector", "found"),
    [
        ("", None),
        ("pgsched.dev/scheduledjob=nightly", "nightly"),
        ("pgsched.dev/scheduledjob==nightly", "nightly"),
    ],
)
def test_runs_are_selected_by_their_scheduledjob_label(selector, found):
    assert params.scheduled_job(selector) == found


@pytest.mark.parametrize(
    "selector",
    ["app=web", "pgsched.dev/scheduledjob!=nightly", "pgsched.dev/scheduledjob", "a=b,c=d"],
)
def test_other_label_selectors_are_refused_with_the_one_that_works(selector):
    with pytest.raises(params.Refused) as refused:
        params.scheduled_job(selector)
    assert refused.value.code == 400
    assert "-l pgsched.dev/scheduledjob=nightly-export" in str(refused.value)


def test_field_selectors_phase_name_and_run_id():
    assert params.fields("status.phase=FAILED") == params.Fields(statuses=["FAILED"])
    assert params.fields("metadata.name=a-1,status.phase==QUEUED") == params.Fields(
        statuses=["QUEUED"], name="a-1"
    )
    assert params.fields("status.id=4711") == params.Fields(run_id=4711)
    for bad in ("status.phase=failed", "status.phase!=FAILED", "spec.x=1", "status.phase",
                "status.id=abc", "status.id=" + "9" * 30):  # fmt: skip
        with pytest.raises(params.Refused) as refused:
            params.fields(bad)
        assert refused.value.code == 400 and "status.phase=FAILED" in str(refused.value)


def test_a_page_is_bounded_whatever_the_limit_asked():
    assert params.limit("") == params.MAX_PAGE
    assert params.limit("50") == 50
    assert params.limit("99999999999") == params.MAX_PAGE
    with pytest.raises(params.Refused, match="limit=50"):
        params.limit("-1")


def test_a_continue_token_is_the_servers_own_or_refused():
    token = params.continue_token(1234)
    assert token is not None and params.before(token) == 1234
    assert params.continue_token(None) is None
    forged = [
        "not base64!",
        base64.urlsafe_b64encode(b"runs.v1:-5").decode(),
        base64.urlsafe_b64encode(b"runs.v1:" + b"9" * 40).decode(),
        base64.urlsafe_b64encode(b"other:12").decode(),
    ]
    for bad in forged:
        with pytest.raises(params.Refused) as refused:
            params.before(bad)
        assert refused.value.code == 400 and "list again from the start" in str(refused.value)


def test_a_runs_name_is_its_jobs_and_ends_with_its_id():
    assert resources.run_id_of("nightly-export-42") == 42
    assert resources.run_id_of("nightly") is None
    assert resources.run_id_of("x-" + "9" * 30) is None  # beyond a bigint: no run


def test_every_table_row_has_a_cell_per_column():
    from datetime import UTC, datetime

    from pgsched.engine.models import Run

    now = datetime(2026, 12, 6, tzinfo=UTC)
    run = Run.from_row(
        {
            "id": 7, "definition_id": "00000000-0000-0000-0000-000000000001",
            "status": "FAILED", "trigger": "manual", "scheduled_for": now,
            "deadline_at": None, "attempt": 1, "retry_of": None, "request_token": None,
            "lease_token": None, "started_at": now, "heartbeat_at": None,
            "finished_at": now, "cancel_requested": False, "cancel_requested_at": None,
            "reason": "NonZeroExit", "error": "exit code 3", "exit_code": 3,
            "retry_hint": None, "k8s_job_name": "nightly-7", "settled_at": now,
            "created_at": now, "cancelled_by": None, "retry_decision": None,
        }
    )  # fmt: skip
    stored = resources.StoredRun("team-a", "nightly", None, run)
    table = resources.table([stored], now=now, continue_token="t", objects="Metadata")
    [row] = table["rows"]
    assert len(row["cells"]) == len(table["columnDefinitions"])
    assert row["object"]["metadata"]["name"] == "nightly-7"
    assert row["object"]["metadata"]["namespace"] == "team-a"
    assert table["metadata"]["continue"] == "t"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (119, "119s"), (200, "3m20s"), (600, "10m"), (7200, "120m"), (18600, "5h10m"),
     (72000, "20h"), (273600, "3d4h"), (3456000, "40d")],
)  # fmt: skip
def test_age_reads_as_kubectls(seconds, shown):
    from datetime import timedelta

    assert resources.age(timedelta(seconds=seconds)) == shown


# -- a Run's body ----------------------------------------------------------------------------


def test_a_run_body_gives_its_name_scheduledjob_and_parameters():
    from pgsched.k8s.runs_api import actions

    body = {
        "apiVersion": "runs.pgsched.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "nightly-rerun", "namespace": "team-a"},
        "spec": {"scheduledJob": "nightly", "parameters": {"region": "eu"}},
    }
    assert actions._parsed("team-a", body) == ("nightly-rerun", "nightly", {"region": "eu"})
    generated = {"metadata": {"generateName": "nightly-"}, "spec": {"scheduledJob": "nightly"}}
    name, _, _ = actions._parsed("team-a", generated)
    assert name.startswith("nightly-") and name[8:].isalpha() and len(name) == 13


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "(body)"),
        ({"spec": {"scheduledJob": "x"}}, "metadata.name"),
        ({"metadata": {"name": "Bad_Name"}, "spec": {"scheduledJob": "x"}}, "metadata.name"),
        ({"metadata": {"name": "a" * 254}, "spec": {"scheduledJob": "x"}}, "metadata.name"),
        ({"metadata": {"name": "ok", "namespace": "team-b"}, "spec": {"scheduledJob": "x"}},
         "metadata.namespace"),
        ({"metadata": {"name": "ok"}, "spec": {}}, "spec.scheduledJob"),
        ({"metadata": {"name": "ok"}, "spec": {"scheduledJob": ["x"]}}, "spec.scheduledJob"),
        ({"metadata": {"name": "ok"}, "spec": {"scheduledJob": "x", "parameters": ["a"]}},
         "spec.parameters"),
        ({"kind": "Job", "metadata": {"name": "ok"}, "spec": {"scheduledJob": "x"}}, "kind"),
    ],
)  # fmt: skip
def test_a_hostile_run_body_is_refused_naming_the_field(body, field):
    from pgsched.k8s.runs_api import actions

    with pytest.raises(actions.Invalid) as refused:
        actions._parsed("team-a", body)
    assert field in [cause.field for cause in refused.value.causes]
    assert all(cause.message for cause in refused.value.causes)


def test_unknown_fields_of_a_run_body_are_named_by_their_path():
    body = {
        "apiVersion": "runs.pgsched.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "a", "labels": {}, "nmae": "typo"},
        "spec": {"scheduledJob": "nightly", "shedule": "* * * * *"},
        "extra": 1,
    }
    assert params.unknown_fields(body) == ["extra", "metadata.nmae", "spec.shedule"]
    assert params.unknown_fields({"spec": {"scheduledJob": "x", "parameters": {}}}) == []


@pytest.mark.parametrize(
    ("given", "mode"), [("", "Warn"), ("Strict", "Strict"), ("Ignore", "Ignore")]
)
def test_field_validation_is_the_api_servers(given, mode):
    assert params.field_validation(given) == mode
    with pytest.raises(params.Refused, match="one of Ignore, Warn, Strict"):
        params.field_validation("strict")


def test_dry_run_is_all_or_nothing():
    assert params.dry_run("") is False
    assert params.dry_run("All") is True
    with pytest.raises(params.Refused, match="the one value is All"):
        params.dry_run("Some")
