"""What a watch of runs sends for a batch of changes, and where it starts: each change as
it left the run (QUEUED, then RUNNING, then COMPLETED, even when read together), and a
resourceVersion that is not a number or is older than the changes kept refused with what
to do."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from uuid import UUID

import pytest

from pgsched.engine.models import Run
from pgsched.k8s.runs_api import params, resources, server, watching
from pgsched.k8s.runs_api.store import Change, Versions

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def completed_run(run_id: int = 7) -> resources.StoredRun:
    run = Run.from_row(
        {
            "id": run_id, "definition_id": UUID("00000000-0000-0000-0000-000000000001"),
            "status": "COMPLETED", "trigger": "manual", "scheduled_for": NOW,
            "deadline_at": None, "attempt": 1, "retry_of": None, "request_token": None,
            "lease_token": None, "started_at": NOW, "heartbeat_at": None,
            "finished_at": NOW, "cancel_requested": False, "cancel_requested_at": None,
            "reason": None, "error": None, "exit_code": 0,
            "retry_hint": None, "k8s_job_name": f"nightly-{run_id}", "settled_at": NOW,
            "created_at": NOW, "cancelled_by": None, "retry_decision": None,
        }
    )  # fmt: skip
    return resources.StoredRun("team-a", "nightly", None, run)


def watch(**overrides: object) -> watching.Watch:
    given: dict[str, object] = {
        "namespaces": ["team-a"],
        "scheduled_job": None,
        "fields": params.Fields(),
        "after": 0,
        "seconds": 60.0,
        "bookmarks": False,
        "objects": None,
        **overrides,
    }
    return watching.Watch(**given)  # type: ignore[arg-type]


def test_changes_read_together_are_each_sent_as_they_left_the_run():
    changes = [
        Change(11, 7, "QUEUED", None, True),
        Change(12, 7, "RUNNING", None, False),
        Change(13, 7, "STARTED", None, False),  # a note: the run as the change before left it
        Change(14, 7, "COMPLETED", None, False),
    ]
    sent = watching.events(changes, {7: completed_run()}, watch(), NOW)
    shown = [
        (event["type"], event["object"]["status"]["phase"], event["object"]["metadata"])
        for event in sent
    ]
    assert [(kind, phase) for kind, phase, _ in shown] == [
        ("ADDED", "QUEUED"),
        ("MODIFIED", "RUNNING"),
        ("MODIFIED", "RUNNING"),
        ("MODIFIED", "COMPLETED"),
    ]
    assert [metadata["resourceVersion"] for _, _, metadata in shown] == ["11", "12", "13", "14"]
    queued = sent[0]["object"]["status"]
    assert queued.get("startedAt") is None and queued.get("finishedAt") is None


def kinds(sent):
    return [
        (
            event["type"],
            event["object"]["status"]["phase"],
            event["object"]["metadata"]["resourceVersion"],
        )
        for event in sent
    ]


LIFE = [
    Change(1, 7, "QUEUED", None, True),
    Change(2, 7, "RUNNING", None, False, "QUEUED"),
    Change(3, 7, "STARTED", None, False),  # a note: no phase changes
    Change(4, 7, "COMPLETED", None, False, "RUNNING"),
]


def test_a_phase_selector_adds_a_run_entering_the_phase_and_deletes_it_as_it_was_on_leaving():
    """As the API server does for an object that starts or stops matching a watch's field
    selector: `kubectl get runs -w --field-selector status.phase=RUNNING` shows what is
    running, and a run that ended leaves it."""
    sent = watching.events(
        LIFE, {7: completed_run()}, watch(fields=params.Fields(statuses=["RUNNING"])), NOW
    )
    assert kinds(sent) == [
        ("ADDED", "RUNNING", "2"),
        ("MODIFIED", "RUNNING", "3"),  # the note: its pod started, while it ran
        ("DELETED", "RUNNING", "4"),
    ]
    deleted = sent[-1]["object"]["status"]
    assert deleted.get("finishedAt") is None and deleted.get("exitCode") is None


def test_a_phase_selector_on_the_end_adds_the_run_once_it_ends():
    sent = watching.events(
        LIFE, {7: completed_run()}, watch(fields=params.Fields(statuses=["COMPLETED"])), NOW
    )
    assert kinds(sent) == [("ADDED", "COMPLETED", "4")]


def test_without_a_selector_a_run_is_added_once_then_modified():
    sent = watching.events(LIFE, {7: completed_run()}, watch(), NOW)
    assert [kind for kind, _, _ in kinds(sent)] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED"]


def test_a_change_whose_previous_status_is_unknown_is_sent_as_a_modification_in_the_phase():
    """Changes recorded before the database kept the previous status."""
    changes = [Change(1, 7, "RUNNING", None, False), Change(2, 7, "COMPLETED", None, False)]
    sent = watching.events(
        changes, {7: completed_run()}, watch(fields=params.Fields(statuses=["RUNNING"])), NOW
    )
    assert kinds(sent) == [("MODIFIED", "RUNNING", "1")]


def test_table_events_carry_one_row_and_the_changes_version():
    [event] = watching.events(
        [Change(5, 7, "COMPLETED", None, False)],
        {7: completed_run()},
        watch(objects="Metadata"),
        NOW,
    )
    table = event["object"]
    assert table["kind"] == "Table" and len(table["rows"]) == 1
    assert table["rows"][0]["object"]["metadata"]["resourceVersion"] == "5"


@pytest.mark.parametrize(("given", "after"), [("", 40), ("0", 40), ("25", 25), ("41", 41)])
def test_a_watch_starts_after_its_version_or_now(given, after):
    assert params.resource_version(given, Versions(current=40, pruned_through=20)) == after


def test_a_version_older_than_the_changes_kept_is_gone_and_says_to_list_again():
    with pytest.raises(params.Refused) as refused:
        params.resource_version("19", Versions(current=40, pruned_through=20))
    assert (refused.value.code, refused.value.reason) == (410, "Expired")
    assert "too old resource version: 19 (20)" in str(refused.value)
    assert "list again" in str(refused.value)


@pytest.mark.parametrize("given", ["abc", "-1", "1e3", "9" * 30])
def test_a_version_that_is_not_ours_is_refused_naming_it(given):
    with pytest.raises(params.Refused) as refused:
        params.resource_version(given, Versions(current=40, pruned_through=0))
    assert refused.value.code == 400
    assert f"resourceVersion {given!r}" in str(refused.value)


def test_a_replica_serving_its_most_watches_answers_429_before_streaming():
    from aiohttp.test_utils import make_mocked_request

    api = server.RunsApi(None, None, None, None, None)  # type: ignore[arg-type]
    api._watches = server.MAX_WATCHES
    request = make_mocked_request("GET", "/apis/runs.pgsched.dev/v1alpha1/runs?watch=1")
    with pytest.raises(params.Refused) as refused:
        asyncio.run(api._watch(request, None, None, params.Fields(), Versions(40, 0)))
    assert (refused.value.code, refused.value.reason) == (429, "TooManyRequests")
    assert f"serves {server.MAX_WATCHES} watches already" in str(refused.value)
