"""Request annotations on a ScheduledJob (``pgsched.k8s.scheduledjobs.commands``), as the sync handles
them against the real database: carried out with the requester recorded, or refused with
a Warning naming the accepted values and nothing else changed. That the API server vouches
for the requester, and the CLI and the Events end to end, are proven on the real API server
(tests/cluster/test_cli_rbac.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from cli_runner import pgsched
from pgsched.db import connection
from pgsched.engine import definitions, runs
from pgsched.k8s.client.finalizers import FINALIZER
from pgsched.k8s.reporting.publisher import Publisher
from pgsched.k8s.scheduledjobs import scheduledjobs
from plugins.no_requests import NoRequests


@pytest.fixture
def context(dsn: str) -> Iterator[scheduledjobs.Context]:
    with connection.pool(dsn, name="pgsched-test-requests", max_size=2) as pool:
        # sync never talks to the API server: no client is needed.
        yield scheduledjobs.Context(
            pool=pool,
            kube=NoRequests(),  # type: ignore[arg-type]
            publisher=Publisher(None),  # type: ignore[arg-type]
            clock=lambda: None,
        )


def body(
    uid: str, annotations: dict[str, str] | None = None, *, name: str = "nightly"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "jobs",
            "uid": uid,
            "generation": 1,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER],
            "annotations": annotations or {},
        },
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}},
        },
        "status": {"observedGeneration": 1},
    }


@pytest.fixture
def job(context: scheduledjobs.Context) -> uuid.UUID:
    uid = str(uuid.uuid4())
    scheduledjobs.sync(context, body(uid), revalidate=True)
    return uuid.UUID(uid)


def answer(context: scheduledjobs.Context, job: uuid.UUID, **annotations: str) -> Any:
    synced = scheduledjobs.sync(context, body(str(job), annotations), revalidate=False)
    assert synced.writes is not None
    return synced.writes


def warnings(writes: Any) -> list[str]:
    assert all(
        (note.type, note.reason) == ("Warning", "InvalidAnnotation") for note in writes.answers
    )
    return [note.message for note in writes.answers]


def all_runs(conn, job):
    return conn.execute(
        "SELECT id, status, trigger, cancel_requested FROM pgsched.job_runs"
        " WHERE definition_id = %s ORDER BY id",
        [job],
    ).fetchall()


def requester(conn, run_id: int) -> str | None:
    found = runs.get(conn, run_id)
    assert found is not None
    return runs.requested_by(conn, found)


def test_a_bad_cancel_value_gets_a_warning_naming_the_accepted_values_and_changes_nothing(
    context, conn, job
):
    queued = runs.run_now(conn, job, token="t").run
    for value, message in (
        ("bogus", '"bogus" is not a run id or "all"'),
        ("ALL", '"ALL" is not a run id or "all"'),
        ("-1", '"-1" is not a run id or "all"'),
        ("9" * 40, f'"{"9" * 40}" is not a run id or "all"'),
        ("424242", "run 424242 is not a run of jobs/nightly"),
    ):
        writes = answer(context, job, **{"pgsched.dev/cancel": value})
        assert warnings(writes) == [
            f"pgsched.dev/cancel: {message} (example: pgsched.dev/cancel=all)"
        ]
        assert [item.annotation for item in writes.remove] == ["pgsched.dev/cancel"]
    assert [(row["id"], row["status"], row["cancel_requested"]) for row in all_runs(conn, job)] == [
        (queued.id, "QUEUED", False)
    ]


def test_a_cancel_naming_a_run_of_another_scheduled_job_changes_nothing(context, conn, job):
    stranger = str(uuid.uuid4())
    scheduledjobs.sync(context, body(stranger, name="stranger"), revalidate=True)
    theirs = runs.run_now(conn, uuid.UUID(stranger), token="t").run
    writes = answer(context, job, **{"pgsched.dev/cancel": str(theirs.id)})
    assert warnings(writes) == [
        f"pgsched.dev/cancel: run {theirs.id} is not a run of jobs/nightly"
        " (example: pgsched.dev/cancel=all)"
    ]
    assert runs.get(conn, theirs.id).status == "QUEUED"


def test_bad_run_now_tokens_get_a_warning_and_queue_nothing(context, conn, job):
    for token in (" ", "x" * 201, "line\nbreak"):
        writes = answer(context, job, **{"pgsched.dev/run-now": token})
        [message] = warnings(writes)
        assert message.startswith("pgsched.dev/run-now: ")
        assert message.endswith(
            "is not a token of 1 to 200 characters without control characters"
            " (example: pgsched.dev/run-now=deploy-1234)"
        )
        assert "\n" not in message  # quoted as JSON: no control character reaches the Event
    assert all_runs(conn, job) == []


def test_run_now_records_its_requester_or_unknown_without_one(context, conn, job):
    writes = answer(
        context,
        job,
        **{"pgsched.dev/run-now": "a", "pgsched.dev/run-now-requested-by": "alice@example.com"},
    )
    assert writes.answers == () and [r.annotation for r in writes.remove] == ["pgsched.dev/run-now"]
    answer(context, job, **{"pgsched.dev/run-now": "b"})  # by hand, with kubectl
    answer(context, job, **{"pgsched.dev/run-now": "a"})  # a token seen before: nothing
    first, second = all_runs(conn, job)
    assert requester(conn, first["id"]) == "alice@example.com"
    assert requester(conn, second["id"]) == runs.UNKNOWN_REQUESTER


def test_a_requester_that_is_not_a_user_name_refuses_the_request(context, conn, job):
    for who in ("", "x" * 257, "alice\u0000"):
        writes = answer(
            context,
            job,
            **{"pgsched.dev/cancel": "all", "pgsched.dev/cancel-requested-by": who},
        )
        [message] = warnings(writes)
        assert message.startswith("pgsched.dev/cancel-requested-by: ")
        assert "is not a user name of 1 to 256 printable characters;" in message
        assert "pgsched.dev/cancel was not carried out" in message
    queued = runs.run_now(conn, job, token="t").run
    assert runs.get(conn, queued.id).status == "QUEUED"


def test_cancel_all_records_who_asked(context, conn, job):
    queued = runs.run_now(conn, job, token="t").run
    writes = answer(
        context,
        job,
        **{"pgsched.dev/cancel": "all", "pgsched.dev/cancel-requested-by": "bob"},
    )
    assert writes.answers == ()
    after = runs.get(conn, queued.id)
    assert (after.status, after.cancelled_by) == ("CANCELLED", "Annotation (bob)")


def test_backfill_annotation_queues_the_range_once_with_its_requester(context, conn, job):
    request = {
        "pgsched.dev/backfill": "2026-05-01T00:00:00Z/2026-05-03T23:59:59Z",
        "pgsched.dev/backfill-requested-by": "carol",
    }
    writes = answer(context, job, **request)
    context.in_hand.clear()  # as the writer does once it removed the request
    answer(context, job, **request)  # the same range again: nothing new
    assert writes.answers == ()
    queued = all_runs(conn, job)
    assert [row["trigger"] for row in queued] == ["backfill"] * 3
    assert {requester(conn, row["id"]) for row in queued} == {"carol"}


def test_bad_backfill_ranges_get_a_warning_and_queue_nothing(context, conn, job):
    example = "(example: pgsched.dev/backfill=2026-06-01T00:00:00Z/2026-06-07T23:59:59Z)"
    for value, message in (
        ("2026-05-01", '"2026-05-01" is not <from>/<to>'),
        ("May/June", '"May" is not an RFC 3339 instant'),
        ("2026-05-01T00:00/2026-05-02T00:00Z", '"2026-05-01T00:00" has no offset (add Z for UTC)'),
        (
            "2026-05-03T00:00:00Z/2026-05-01T00:00:00Z",
            "from 2026-05-03T00:00:00+00:00 is after to 2026-05-01T00:00:00+00:00:"
            " nothing to backfill",
        ),
        ("2026-05-01T00:00:00Z/2999-01-01T00:00:00Z", "is in the future"),
        ("x" * 101, "is 101 characters long, more than 100"),
    ):
        [warning] = warnings(answer(context, job, **{"pgsched.dev/backfill": value}))
        assert warning.startswith("pgsched.dev/backfill: ") and message in warning, warning
        assert warning.endswith(example)
    assert all_runs(conn, job) == []


def test_a_request_is_carried_out_once_until_the_writer_removed_it(context, conn, job):
    """Watch events that come before the removal (the finalizer's, the status's) show the
    request again: it is not carried out again."""
    request = {"pgsched.dev/run-now": "once", "pgsched.dev/run-now-requested-by": "erin"}
    first = answer(context, job, **request)
    echo = scheduledjobs.sync(context, body(str(job), request), revalidate=False)
    assert echo == scheduledjobs.Synced()
    assert len(all_runs(conn, job)) == 1
    context.in_hand.clear()  # removed; written again later: handled (and idempotent)
    assert answer(context, job, **request).remove == first.remove
    assert len(all_runs(conn, job)) == 1


def test_requests_carried_out_again_by_a_restarted_operator_change_nothing(context, conn, job):
    """While a request waits for the standbys, an operator restarted (or another replica)
    carries it out again, and after a failover the new primary may have its commit after
    all: run-now, a cancel of a run id and a backfill must then change nothing."""
    queued = runs.run_now(conn, job, token="t").run
    requests = {
        "pgsched.dev/run-now": "deploy-1",
        "pgsched.dev/cancel": str(queued.id),
        "pgsched.dev/backfill": "2026-05-01T00:00:00Z/2026-05-03T23:59:59Z",
        "pgsched.dev/cancel-requested-by": "dave",
    }
    first = answer(context, job, **requests)
    before = conn.execute(
        "SELECT * FROM pgsched.job_runs WHERE definition_id = %s ORDER BY id", [job]
    ).fetchall()
    assert len(before) == 5 and first.answers == ()  # t, deploy-1, three occurrences

    restarted = replace(context, in_hand={}, unflushed={})
    again = answer(restarted, job, **requests)

    assert again.answers == () and len(again.remove) == 3
    after = conn.execute(
        "SELECT * FROM pgsched.job_runs WHERE definition_id = %s ORDER BY id", [job]
    ).fetchall()
    assert after == before
    assert (after[0]["status"], after[0]["cancelled_by"]) == ("CANCELLED", "Annotation (dave)")


def test_resume_clears_an_automatic_suspension_and_asks_for_the_status(context, conn, job):
    conn.execute(
        "UPDATE pgsched.job_definitions SET auto_suspended_at = now(),"
        " auto_suspend_reason = '3 consecutive runs failed', consecutive_failures = 3"
        " WHERE id = %s",
        [job],
    )
    [refused] = warnings(answer(context, job, **{"pgsched.dev/resume": "yes"}))
    assert refused == ('pgsched.dev/resume: "yes" is not "true" (example: pgsched.dev/resume=true)')
    assert definitions.get(conn, job).auto_suspended_at is not None

    writes = answer(context, job, **{"pgsched.dev/resume": "true"})
    assert writes.refresh and writes.answers == ()
    after = definitions.get(conn, job)
    assert after.auto_suspended_at is None and after.consecutive_failures == 0


def test_describe_shows_who_requested_a_run(context, conn, job, dsn):
    answer(context, job, **{"pgsched.dev/run-now": "a", "pgsched.dev/run-now-requested-by": "dave"})
    [row] = all_runs(conn, job)
    described = pgsched("describe", str(row["id"]), dsn=dsn)
    data = pgsched("describe", str(row["id"]), "-o", "json", dsn=dsn).json()
    [line] = [line for line in described.out.splitlines() if line.startswith("Requested by")]
    assert line.split() == ["Requested", "by:", "dave"]
    assert data["requestedBy"] == "dave"


def test_the_administrators_database_path_records_the_machine_user_and_says_it_bypasses_rbac(
    conn, job, dsn
):
    result = pgsched("run-now", "nightly", "-n", "jobs", "--database", dsn=dsn)
    assert result.code == 0, result.err
    assert "bypass" not in result.out
    assert (
        "note: --database: acting on the database directly with the schema owner's DSN;"
        " Kubernetes RBAC and the API server's audit log do not apply" in result.err
    )
    [row] = all_runs(conn, job)
    assert requester(conn, row["id"]).startswith("CLI (")
    helped = pgsched("run-now", "--help")
    assert "BYPASSING Kubernetes RBAC" in " ".join(helped.out.split())


def test_without_database_the_cli_needs_kubernetes_not_the_dsn(conn, job, dsn):
    result = pgsched("run-now", "nightly", "-n", "jobs", dsn=dsn)
    assert result.code == 1 and "cannot load Kubernetes credentials" in result.err
    assert all_runs(conn, job) == []
    bare = pgsched("cancel", "17", dsn=dsn)
    assert bare.code == 2 and "name its ScheduledJob too" in bare.err
