"""The Kubernetes benchmarks run at tiny scale on a real control plane, so they don't rot.

Like ``tests/db/test_bench_smoke.py`` this checks that both sides of every comparison were
measured (pgsched's and CronJobs' Jobs and their workloads' first instruction, the operator
and a plain client, the operator with and without ScheduledJobs, each fleet size), not the
figures, which mean nothing at this scale on a shared machine. The real runs are
``python -m bench skew notify_skew footprint fleet stampede namespace_deletion``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench.context import Context
from benchsmoke import quick_context
from devenv.controlplane import ControlPlane
from devenv.postgres import PostgresServer
from plugins.cluster import require_binaries

# skew, notify_skew and footprint run pods: on the session's cluster, in namespaces of their
# own (cluster), each in a class of its own because hack/test.sh's parallel workers take a
# module or a class at a time (--dist loadscope): so the three run at once. fleet, stampede
# and namespace_deletion run none: a host-only control plane each, beside anything
# (api_only), as does runs_api_kubectl (the Run API through the aggregation layer, no pods).


@pytest.fixture
def ctx(postgres: PostgresServer, tmp_path: Path) -> Context:
    require_binaries()  # the benchmarks start their own control plane from them
    return quick_context(postgres, tmp_path)


@pytest.fixture
def on_cluster(ctx: Context, cluster: ControlPlane, crd: None) -> Context:
    """The benchmark on the session's cluster (bench.kube makes its namespaces there)."""
    return dataclasses.replace(ctx, cluster=cluster)


def finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


@pytest.mark.cluster
class TestSkew:
    def test_skew_times_pgsched_and_cronjob_jobs_and_a_burst_against_a_plain_client(
        self, on_cluster: Context
    ) -> None:
        report = cli.run_one("skew", on_cluster)
        ours, theirs = report.data["skew"]["pgsched"], report.data["skew"]["cronjob"]
        assert ours and theirs, "both pgsched and the CronJob controller must have created Jobs"
        assert len(ours) == len(theirs), "the same schedules must give the same number of Jobs"
        assert all(finite(value) for value in ours + theirs)
        # Each workload's first instruction, on the host's clock: never before its due instant.
        ours_ran = report.data["skew"]["pgsched_first_instruction"]
        theirs_ran = report.data["skew"]["cronjob_first_instruction"]
        assert ours_ran and theirs_ran, "both sides' workloads must have been timed"
        assert all(finite(value) for value in ours_ran + theirs_ran)
        burst = next(row for row in report.rows if row["measure"].startswith("burst"))
        assert burst["pgsched"] > 0 and burst["baseline"] > 0
        assert json.loads((on_cluster.out_dir / "skew.json").read_text())["floors"]


@pytest.mark.cluster
class TestNotifySkew:
    def test_notify_skew_times_the_same_jobs_with_the_receiver_answering_then_hanging(
        self, on_cluster: Context
    ) -> None:
        report = cli.run_one("notify_skew", on_cluster)
        for arm in ("baseline", "hanging"):
            started = report.data[arm]["started"]
            assert started and all(finite(value) for value in started), arm
            assert report.data[arm]["created"], arm
        # Kubernetes timestamps have whole seconds (a 0 / 0 ratio is NaN); the database's
        # do not.
        precise = [row for row in report.rows if "started_at" in row["measure"]]
        assert precise and all(finite(row["ratio"]) for row in precise)
        assert "the hanging one 0 " not in report.notes[-1], "the hanging receiver was reached"
        assert (on_cluster.out_dir / "notify_skew.png").is_file() and report.floors


@pytest.mark.cluster
class TestFootprint:
    def test_footprint_samples_the_operator_with_and_without_scheduled_jobs(
        self, on_cluster: Context
    ) -> None:
        report = cli.run_one("footprint", on_cluster)
        assert len(report.rows) == 2
        for row in report.rows:
            assert row["RSS MiB"] > 20 and row["baseline RSS MiB"] > 20, row
            assert finite(row["CPU %"]) and finite(row["baseline CPU %"]), row
        assert "300 ScheduledJobs accepted" in report.notes[0]


@pytest.mark.api_only
def test_fleet_measures_sync_memory_and_idle_requests_per_fleet_size(ctx: Context) -> None:
    report = cli.run_one("fleet", dataclasses.replace(ctx, sizes=(20, 60)))
    assert [row["ScheduledJobs"] for row in report.rows] == [0, 20, 60]
    for row in report.rows:
        assert row["RSS idle MiB"] > 20 and finite(row["sync s"]), row
        assert finite(row["idle req/min"]) and finite(row["tick mean ms"]), row
    assert report.rows[-1]["sync writes"] >= 60, "each ScheduledJob's status is a write"
    assert (ctx.out_dir / "fleet.png").is_file() and report.floors


@pytest.mark.api_only
def test_stampede_times_the_due_instant_to_each_job_against_a_plain_client(ctx: Context) -> None:
    report = cli.run_one("stampede", ctx)
    data = report.data
    assert len(data["ours"]) == len(data["plain"]) == 100, "both sides create every Job"
    assert len(data["others_skew"]) == 5 and all(finite(v) for v in data["ours"] + data["plain"])
    assert len(data["others_status"]) == 5, "every other job's status shows its run"
    assert data["rss_peak"] >= data["rss_before"] > 20
    assert json.loads((ctx.out_dir / "stampede.json").read_text())["floors"]


@pytest.mark.api_only
def test_namespace_deletion_times_another_namespaces_statuses_quiet_and_while_one_goes(
    ctx: Context,
) -> None:
    report = cli.run_one("namespace_deletion", ctx)
    data = report.data
    assert len(data["lag"]["quiet"]) == 2 * 5, "every quiet phase's runs showed in a status"
    assert len(data["lag"]["deleting"]) >= 2 * 5, "so did the deleting phases' runs"
    assert all(finite(v) and v >= 0 for v in data["lag"]["quiet"] + data["lag"]["deleting"])
    assert len(data["gone_after"]) == 2 and all(v > 0 for v in data["gone_after"])
    assert json.loads((ctx.out_dir / "namespace_deletion.json").read_text())["floors"]


@pytest.mark.api_only
def test_runs_api_kubectl_times_runs_pages_through_the_api_server_beside_jobs(
    ctx: Context,
) -> None:
    report = cli.run_one("runs_api_kubectl", ctx)
    assert [row["page"] for row in report.rows] == [
        "runs: first page",
        "runs: middle page",
        "runs: last page",
        "runs: first FAILED page",
        "runs: first page, to the operator directly",
        "runs: one run, described",
        "jobs: first page",
        "runs: first page (database)",
        "runs: middle page (database)",
        "runs: last page (database)",
        "runs: first FAILED page (database)",
    ]
    for row in report.rows:
        assert finite(row["p99 ms"]) and finite(row["p99 / jobs p99"]), row
    measured = report.data["milliseconds"]
    assert len({len(times) for times in measured.values()}) == 1, "every page, every round"
    assert all(measured.values())
    assert report.floors and any("paging to the end" in note for note in report.notes)
