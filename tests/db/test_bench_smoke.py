"""Every benchmark runs at tiny scale against the real server, so none of them rots.

These check that each benchmark still measures both sides of its comparison and produces
a finite, positive ratio, its JSON and its plot — not the numbers themselves, which on a
shared machine mean nothing at this scale. The real runs are ``python -m bench ...``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench.context import Context
from benchsmoke import quick_context
from devenv.postgres import PostgresServer


@pytest.fixture
def ctx(postgres: PostgresServer, tmp_path: Path) -> Context:
    return quick_context(postgres, tmp_path)


def positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def written(ctx: Context, name: str) -> dict:
    payload = json.loads((ctx.out_dir / f"{name}.json").read_text())
    for plot in payload["plots"]:
        assert (ctx.out_dir / plot).stat().st_size > 10_000, f"{plot} looks empty"
    return payload


def test_throughput_measures_raw_and_dispatcher_and_their_ratio(ctx: Context) -> None:
    report = cli.run_one("throughput", ctx)
    arms = {(row["variant"], row["arm"]): row for row in report.rows}
    engine = ("raw", "dispatcher", "dispatcher, try locks")
    measured = [("uncapped", arm) for arm in engine]
    measured += [("cap 1 + complete", arm) for arm in engine]
    measured += [("10 pools", arm) for arm in engine[:2]]
    for variant, arm in measured:
        row = arms[(variant, arm)]
        assert positive(row["claims/s"]) and positive(row["ratio to raw"]), row
        assert positive(row["CPU us/claim"]) and positive(row["CPU ratio"]), row
    assert arms[("uncapped", "raw")]["ratio to raw"] == 1.0
    assert written(ctx, "throughput")["floors"]


def test_scaling_compares_dispatcher_with_python_and_pgbench_raw_claims(ctx: Context) -> None:
    report = cli.run_one("scaling", ctx)
    for row in report.rows:
        for column in ("raw claims/s", "pgbench claims/s", "dispatcher claims/s"):
            assert positive(row[column]), (column, row)
        assert positive(row["dispatcher / raw"]) and positive(row["dispatcher / pgbench"])
        assert positive(row["try locks / raw"])
        assert positive(row["CPU ratio"])
    assert written(ctx, "scaling")["plots"] == ["scaling.png"]


def test_latency_compares_history_with_empty_table(ctx: Context) -> None:
    report = cli.run_one("latency", ctx)
    tables = {row["table"] for row in report.rows}
    assert len(tables) == 2
    for row in report.rows:
        assert positive(row["p50 ms"]) and positive(row["p99 ms"]) and positive(row["p99 ratio"])
    assert written(ctx, "latency")["plots"] == ["latency.png"]


def test_idle_tick_times_every_phase_against_an_empty_engine(ctx: Context) -> None:
    report = cli.run_one("idle_tick", ctx)
    phases = {row["phase"]: row for row in report.rows}
    assert set(phases) == {"tick", "materialize", "reap", "settle", "dispatch"}
    assert positive(phases["tick"]["ratio"])
    assert "0 ticks materialized something" in report.notes[0], "the tick must really be idle"


def test_materialize_queues_one_run_per_due_definition_for_both_arms(ctx: Context) -> None:
    report = cli.run_one("materialize", ctx)
    for row in report.rows:
        assert row["runs queued"] == row["definitions"]
        assert positive(row["runs/s"]) and positive(row["ratio to SQL only"])


def test_peer_burns_down_the_same_jobs_with_procrastinate_and_pgsched(ctx: Context) -> None:
    report = cli.run_one("peer", ctx)
    systems = {row["system"] for row in report.rows}
    assert {"procrastinate", "pgsched batch 50"} <= systems
    for row in report.rows:
        assert positive(row["jobs/s"]) and positive(row["ratio to procrastinate"])
    assert written(ctx, "peer")["plots"] == ["peer.png"]


def test_bloat_holds_a_snapshot_and_watches_dead_tuples_grow(ctx: Context) -> None:
    report = cli.run_one("bloat", ctx)
    phases = {row["phase"]: row for row in report.rows}
    assert {"baseline", "snapshot held", "after release"} <= set(phases)
    assert positive(phases["snapshot held"]["claim p50 ms"])
    stats = report.data["stats"]
    held = [s["xmin_age"] for s in stats if s["phase"] == "snapshot held"]
    assert held and max(held) > 0, "the snapshot must hold back the xmin horizon"
    assert written(ctx, "bloat")["plots"] == ["bloat.png"]


def test_locks_compares_locked_and_unlocked_claims_on_the_same_data(ctx: Context) -> None:
    report = cli.run_one("locks", ctx)
    for row in report.rows:
        assert positive(row["locked claims/s"]) and positive(row["unlocked claims/s"])
        assert positive(row["locked / unlocked"])
        assert positive(row["locked CPU us/claim"]) and positive(row["unlocked CPU us/claim"])
    one = [row for row in report.rows if row["definitions"] == 1]
    assert one and all(row["locks per claim call"] == 1 for row in one)
    assert written(ctx, "locks")["plots"] == ["locks.png"]


def test_history_grows_the_table_and_drops_a_month_while_claiming(ctx: Context) -> None:
    report = cli.run_one("history", ctx)
    assert [row["history rows"] for row in report.rows] == [0, 5_000, 20_000]
    assert all(positive(row["p99 ratio"]) for row in report.rows)
    assert all(positive(row["runs of big job ms"]) for row in report.rows)
    retention = written(ctx, "history")["data"]["retention"]
    assert retention["rows"] > 0 and retention["before"] and retention["after"]
    assert len(report.floors) == 2


def test_run_api_connections_beats_every_run_on_a_bounded_pool_and_sessions_run_out(
    ctx: Context,
) -> None:
    from bench import run_api_connections as bench

    report = cli.run_one("run_api_connections", ctx)
    summary = report.data["summary"]
    api, sessions = summary[bench.RUN_API], summary[bench.SESSIONS]
    runs = bench.QUICK.runs
    assert api["alive"] == runs and api["would_reap"] == 0, api
    assert positive(api["p50_ms"]) and positive(api["p99_ms"]), api
    assert api["pool_max"] <= bench.POOL_SIZE and api["sessions_max"] <= bench.POOL_SIZE + 2
    # max_connections 50 holds fewer sessions than 100 pods want: the rest are refused.
    assert 0 < sessions["connected"] < runs and sessions["too_many_clients"] > 0, sessions
    assert sessions["would_reap"] > 0 and positive(sessions["p50_ms"]), sessions
    assert written(ctx, "run_api_connections")["plots"] == ["run_api_connections.png"]


def test_run_api_flood_measures_the_neighbours_beats_with_and_without_the_flood(
    ctx: Context,
) -> None:
    report = cli.run_one("run_api_flood", ctx)
    phases = report.data["phases"]
    assert [phase["kind"] for phase in phases] == [
        "baseline",
        "flood",
        "baseline",
        "flood",
        "flood, profiled",
    ]
    for phase in phases:
        assert phase["B beats"] > 0 and positive(phase["B p99 ms"]), phase
        if phase["kind"] != "baseline":
            assert phase["A req/s"] > 0, phase
    assert positive(report.data["b_p99_ratio_pooled"]) and positive(report.data["a_rate"])
    assert report.data["profile"], "the profiled phase must leave a profile"
    assert written(ctx, "run_api_flood")["plots"] == ["run_api_flood.png"]


def test_runs_api_pages_times_three_pages_per_level_and_namespace_size(ctx: Context) -> None:
    report = cli.run_one("runs_api_pages", ctx)
    pages = {(row["ScheduledJobs"], row["history rows"], row["page"]) for row in report.rows}
    assert pages == {
        (definitions, rows, page)
        for definitions in (10, 100)
        for rows in (2_000, 6_000)
        for page in ("first", "deep", "failed")
    }
    assert all(positive(row["p99 ms"]) and positive(row["p99 ratio"]) for row in report.rows)
    assert written(ctx, "runs_api_pages")["plots"] == ["runs_api_pages.png"]
