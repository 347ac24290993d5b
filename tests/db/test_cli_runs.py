"""``pgsched runs`` and ``pgsched describe`` against the real database."""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime, timedelta

from psycopg import sql

from cli_runner import kubeconfig_in, pgsched
from factories import RecordingLauncher, define
from pgsched.engine import definitions, dispatch, lease, runs, settle

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def fail(conn, run, *, reason="NonZeroExit", error="container main exited with code 1", at):
    assert lease.finish(
        conn, lease.Lease(run.id, run.lease_token), "FAILED", reason=reason, error=error, now=at
    )


def test_runs_lists_every_attempt_newest_first_in_the_jobs_time_zone(dsn, conn):
    job = define(
        conn,
        "report",
        namespace="jobs",
        timeZone="Europe/Sofia",
        retryPolicy={"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 0, "jitter": 0}},
        now=T0,
    )
    first = runs.run_now(conn, job.id, token="a", scheduled_for=T0).run
    [claimed] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    fail(conn, claimed, at=T0 + timedelta(seconds=90))
    [retried] = settle.run_once(conn, now=T0 + timedelta(seconds=91)).retried

    result = pgsched("runs", "report", "-n", "jobs", dsn=dsn)

    assert result.code == 0, result.err
    header, newer, older = result.out.splitlines()
    assert header.split() == [
        "ID", "STATUS", "REASON", "ATTEMPT", "TRIGGER", "SCHEDULED", "STARTED", "FINISHED", "DURATION",
        "CHAIN",
    ]  # fmt: skip
    assert newer.split()[:5] == [str(retried.retry_id), "QUEUED", "-", "2", "retry"]
    assert older.split()[:5] == [str(first.id), "FAILED", "NonZeroExit", "1", "manual"]
    assert "2026-06-01 15:00:00 EEST" in older  # 12:00Z in Sofia, summer time
    assert older.split()[-2:] == ["1m30s", "-"]  # no chain


def test_runs_json_has_utc_instants_and_no_lease_token(dsn, conn):
    job = define(conn, "report", now=T0)
    queued = runs.run_now(conn, job.id, token="a", scheduled_for=T0).run
    data = pgsched("runs", "report", "-o", "json", dsn=dsn).json()
    assert data["scheduledJob"] == "default/report"
    [item] = data["runs"]
    assert item["id"] == queued.id and item["scheduledFor"] == "2026-06-01T12:00:00Z"
    assert "leaseToken" not in item and "lease_token" not in item


def test_runs_filters_by_status_and_limits(dsn, conn):
    job = define(conn, "report", maxConcurrentRuns=5, now=T0)
    for token in "abc":
        runs.run_now(conn, job.id, token=token, scheduled_for=T0)
    runs.cancel_run(conn, runs.history(conn, job.id)[0].id, by=runs.BY_CLI)
    data = pgsched("runs", "report", "--status", "queued", "--limit", "1", "-o", "json", dsn=dsn)
    assert [item["status"] for item in data.json()["runs"]] == ["QUEUED"]


def test_runs_with_several_statuses_lists_them_merged_newest_first(dsn, conn):
    job = define(conn, "report", maxConcurrentRuns=5, now=T0)
    for token in "abcdef":
        runs.run_now(conn, job.id, token=token, scheduled_for=T0)
    ids = [run.id for run in runs.history(conn, job.id)]  # newest first
    for run_id in ids[1::2]:
        runs.cancel_run(conn, run_id, by=runs.BY_CLI)
    args = ["runs", "report", "--status", "CANCELLED", "--status", "queued"]
    data = pgsched(*args, "--status", "QUEUED", "--limit", "5", "-o", "json", dsn=dsn).json()
    assert [item["id"] for item in data["runs"]] == ids[:5]
    cancelled = pgsched("runs", "report", "--status", "CANCELLED", "-o", "json", dsn=dsn).json()
    assert [item["id"] for item in cancelled["runs"]] == ids[1::2]


def test_runs_with_a_status_the_job_has_none_of_reads_a_few_pages_not_its_runs(conn):
    from pgsched.db import queries

    job = define(conn, "busy", now=T0)
    other = define(conn, "flaky", now=T0)
    conn.execute(
        "INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for,"
        " request_token, finished_at, settled_at)"
        " SELECT CASE WHEN g %% 10 = 0 THEN %s ELSE %s END,"
        " CASE WHEN g %% 10 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, 'manual',"
        " %s - g * interval '1 second', 'r' || g, %s, %s FROM generate_series(1, 50000) g",
        [other.id, job.id, T0, T0, T0],
    )
    conn.execute("ANALYZE pgsched.job_runs")
    plan = conn.execute(
        sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}").format(queries.get("run_history")),
        {"definition_ids": [job.id], "statuses": ["FAILED"], "limit": 20},
    ).fetchone()["QUERY PLAN"][0]
    assert plan["Plan"]["Actual Rows"] == 0
    assert plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"] < 50, plan


def test_runs_of_an_unknown_scheduled_job_says_where_it_looked(dsn, conn):
    result = pgsched("runs", "nope", "-n", "jobs", dsn=dsn)
    assert result.code == 1
    assert "no ScheduledJob jobs/nope in the pgsched database" in result.err


def test_runs_namespace_defaults_to_the_kubeconfig_context(dsn, conn, tmp_path):
    define(conn, "report", namespace="team-a", now=T0)
    kubeconfig = kubeconfig_in(tmp_path, namespace="team-a")
    result = pgsched("runs", "report", dsn=dsn, kubeconfig=kubeconfig)
    assert result.code == 0, result.err
    assert "no runs of team-a/report yet" in result.out


def test_runs_namespace_merges_kubeconfig_files_as_kubectl_does(dsn, conn, tmp_path):
    """$KUBECONFIG's files in order: the first to set current-context wins, contexts are
    looked up across all of them, and --context picks another one."""
    define(conn, "report", namespace="team-b", now=T0)
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("current-context: b\n")
    second.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "contexts: [{name: a, context: {cluster: k, user: u, namespace: team-a}},"
        " {name: b, context: {cluster: k, user: u, namespace: team-b}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    env = {"KUBECONFIG": f"{first}{os.pathsep}{second}"}
    merged = pgsched("runs", "report", dsn=dsn, env=env)
    assert merged.code == 0 and "no runs of team-b/report yet" in merged.out, merged
    chosen = pgsched("runs", "report", "--context", "a", dsn=dsn, env=env)
    assert chosen.code == 1 and "no ScheduledJob team-a/report" in chosen.err, chosen


def test_runs_bad_arguments_are_usage_errors(dsn, conn):
    define(conn, "report", now=T0)
    for argv, message in (
        (["runs", "report", "--limit", "0"], "0 must be at least 1"),
        (["runs", "report", "--status", "DONE"], "'DONE' is not a run status"),
        (["runs"], "the following arguments are required: SJ"),
    ):
        result = pgsched(*argv, dsn=dsn)
        assert result.code == 2 and message in result.err, (argv, result)


def test_runs_without_a_database_is_a_usage_error(conn):
    result = pgsched("runs", "report")
    assert result.code == 2, result
    assert "pass --dsn (or set PGSCHED_DSN), or a kubeconfig" in result.err  # the Run API's


def test_describe_shows_the_error_the_job_and_the_retry_chain(dsn, conn):
    job = define(
        conn,
        "report",
        retryPolicy={"retryOn": ["NonZeroExit"], "backoff": {"initialSeconds": 0, "jitter": 0}},
        now=T0,
    )
    runs.run_now(conn, job.id, token="a", scheduled_for=T0)
    [first] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    fail(conn, first, at=T0 + timedelta(seconds=5))
    [retry] = settle.run_once(conn, now=T0 + timedelta(seconds=6)).retried

    result = pgsched("describe", str(first.id), dsn=dsn)

    assert result.code == 0, result.err
    lines = dict(line.split(":", 1) for line in result.out.splitlines() if ": " in line)
    assert lines["Status"].strip() == "FAILED"
    assert lines["Error"].strip() == "container main exited with code 1"
    assert lines["Attempt"].strip() == f"1 (retried as run {retry.retry_id})"
    assert lines["Kubernetes Job"].strip() == f"default/report-{first.id}"
    assert (
        lines["Logs"].strip() == f"kubectl logs -n default job/report-{first.id} --all-containers"
    )
    assert "Retry chain:" in result.out
    chain = result.out.split("Retry chain:")[1].strip().splitlines()[1:]
    assert [row.split()[:3] for row in chain] == [
        ["1", f"{first.id}", "*"],
        ["2", f"{retry.retry_id}", "QUEUED"],
    ]

    data = pgsched("describe", str(retry.retry_id), "-o", "json", dsn=dsn).json()
    assert [item["id"] for item in data["retryChain"]] == [first.id, retry.retry_id]
    assert data["run"]["retryOf"] == first.id
    assert data["scheduledJob"] == {
        "namespace": "default",
        "name": "report",
        "uid": str(job.id),
        "timeZone": "UTC",
        "deleted": False,
    }


def test_describe_refuses_what_is_not_a_run_id(dsn, conn):
    bad = pgsched("describe", "report", dsn=dsn)
    assert bad.code == 2 and "'report' is not a run id" in bad.err
    missing = pgsched("describe", "999999", dsn=dsn)
    assert missing.code == 1 and "no run with id 999999" in missing.err


def test_runs_and_describe_show_the_chain_both_ways(dsn, conn):
    extract = define(conn, "extract", schedule="0 0 1 1 *", now=T0)
    define(conn, "load", after=[{"scheduledJob": "extract"}], now=T0)
    runs.run_now(conn, extract.id, token="a", scheduled_for=T0)
    [upstream] = dispatch.run_once(conn, RecordingLauncher(), now=T0).claimed
    assert lease.finish(conn, lease.Lease(upstream.id, upstream.lease_token), "COMPLETED", now=T0)
    [down] = settle.run_once(conn, now=T0 + timedelta(seconds=1)).chained

    result = pgsched("runs", "extract", dsn=dsn)
    assert result.code == 0, result.err
    assert result.out.splitlines()[1].endswith(f"→ load {down.run_id}")
    result = pgsched("runs", "load", dsn=dsn)
    assert result.out.splitlines()[1].endswith(f"← {upstream.id}")
    assert result.out.splitlines()[1].split()[4] == "upstream"

    described = pgsched("describe", str(down.run_id), dsn=dsn)
    assert f"{upstream.id} of default/extract (COMPLETED)" in described.out
    described = pgsched("describe", str(upstream.id), "-o", "json", dsn=dsn).json()
    assert described["run"]["triggeredRuns"] == [
        {"scheduledJob": "load", "runId": down.run_id, "status": "QUEUED"}
    ]
    assert (
        pgsched("describe", str(down.run_id), "-o", "json", dsn=dsn).json()["upstreamRun"]["id"]
        == upstream.id
    )


def test_runs_of_a_deleted_and_recreated_job_stay_listed_with_include_deleted(dsn, conn):
    old = define(conn, "report", now=T0, uid=uuid.uuid4())
    first = runs.run_now(conn, old.id, token="a", scheduled_for=T0).run
    definitions.delete(conn, old.id)

    gone = pgsched("runs", "report", dsn=dsn)
    assert gone.code == 1
    assert "was deleted at" in gone.err and "pgsched runs report -n default --include-deleted" in (
        gone.err
    )

    new = define(conn, "report", now=T0, uid=uuid.uuid4())
    second = runs.run_now(conn, new.id, token="a", scheduled_for=T0).run
    live = pgsched("runs", "report", "-o", "json", dsn=dsn).json()
    both = pgsched("runs", "report", "--include-deleted", "-o", "json", dsn=dsn).json()
    table = pgsched("runs", "report", "--include-deleted", dsn=dsn).out

    assert [item["id"] for item in live["runs"]] == [second.id]
    assert [item["id"] for item in both["runs"]] == [second.id, first.id]
    assert [item["scheduledJobUid"] for item in both["runs"]] == [str(new.id), str(old.id)]
    assert table.splitlines()[0].split()[-1] == "SCHEDULEDJOB"
    assert table.splitlines()[1].split()[-1] == "live"
    assert re.search(r"deleted \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", table.splitlines()[2])
