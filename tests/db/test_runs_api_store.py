"""The Run API's reads against the real database: pages by keyset over every ScheduledJob
of a namespace (deleted ones' runs too), status filters, and namespaces kept apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from db.test_notifications import claimed_run, end_run
from factories import define
from pgsched.engine import definitions, run_description, run_json

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NEVER_DUE = "0 3 1 1 *"


def make_runs(conn, job, statuses, start=0):
    ids = []
    for index, status in enumerate(statuses):
        at = T0 + timedelta(minutes=start + index)
        run = claimed_run(conn, job, at)
        end_run(conn, run, status, at + timedelta(seconds=1))
        ids.append(run.id)
    return ids


def all_pages(runs_reader, **where):
    seen, before = [], None
    while True:
        page = runs_reader.page(before=before, limit=2, **where)
        seen.append([item.run.id for item in page.runs])
        if page.next_before is None:
            return seen
        before = page.next_before


def test_pages_walk_every_scheduledjob_of_a_namespace_newest_first(conn, runs_reader):
    a = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    b = define(conn, "b", namespace="team", schedule=NEVER_DUE, now=T0)
    other = define(conn, "a", namespace="other", schedule=NEVER_DUE, now=T0)
    ids = make_runs(conn, a, ["COMPLETED", "FAILED"]) + make_runs(conn, b, ["COMPLETED"], 10)
    ids += make_runs(conn, a, ["FAILED"], 20)
    make_runs(conn, other, ["FAILED"], 30)
    pages = all_pages(runs_reader, namespaces=["team"], scheduled_job=None, statuses=None)
    assert pages == [sorted(ids, reverse=True)[:2], sorted(ids, reverse=True)[2:]]
    failed = all_pages(runs_reader, namespaces=["team"], scheduled_job=None, statuses=["FAILED"])
    assert [run for page in failed for run in page] == [ids[3], ids[1]]
    of_b = runs_reader.page(
        namespaces=["team"], scheduled_job="b", statuses=None, before=None, limit=5
    )
    assert [item.run.id for item in of_b.runs] == [ids[2]] and of_b.next_before is None
    everywhere = runs_reader.page(
        namespaces=None, scheduled_job="a", statuses=None, before=None, limit=9
    )
    assert {item.namespace for item in everywhere.runs} == {"team", "other"}


def test_a_deleted_scheduledjobs_runs_stay_listed_and_say_so(conn, runs_reader):
    job = define(conn, "gone", namespace="team", schedule=NEVER_DUE, now=T0)
    [run_id] = make_runs(conn, job, ["COMPLETED"])
    definitions.delete(conn, job.id, now=T0 + timedelta(hours=1))
    page = runs_reader.page(
        namespaces=["team"], scheduled_job=None, statuses=None, before=None, limit=5
    )
    [found] = page.runs
    assert found.run.id == run_id and found.scheduled_job_deleted_at is not None
    assert found.name == f"gone-{run_id}"
    assert runs_reader.one("team", run_id) is not None
    assert runs_reader.one("other", run_id) is None  # a run is found only in its own namespace
    assert runs_reader.namespaces() == ["team"]


def test_a_run_got_by_name_carries_what_pgsched_describe_says_of_it(conn, runs_reader):
    """The Run API gives a tenant's CLI the same document and lines the CLI makes from the
    database: nothing lost on the way through JSON (times to the microsecond, durations,
    numbers)."""
    job = define(conn, "a", namespace="team", schedule=NEVER_DUE, now=T0)
    [run_id] = make_runs(conn, job, ["FAILED"])
    described = runs_reader.described(run_id)
    assert described is not None
    direct = run_description.of_run(conn, run_id, now=T0 + timedelta(hours=1))
    assert direct is not None
    assert run_description.lines_from_json(described.pop("lines")) == run_description.lines(direct)
    assert described == run_json.plain(run_description.as_json(direct))
    assert described["run"]["status"] == "FAILED" and described["scheduledJob"]["name"] == "a"
    assert runs_reader.described(run_id + 1000) is None
