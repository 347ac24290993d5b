"""Web UI page latency on a database with 1M runs: ``python -m bench.ui``.

1,000 ScheduledJobs (bench.seed's mix of cron, RRULE and one-shot schedules in several
zones), 800,000 finished runs spread over them and 200,000 more on one busy job that ran
every minute (skips and failures among them), then VACUUM ANALYZE. The UI is served as
``pgsched ui --no-auth`` serves it (the same aiohttp app, pool and pages; access checks
are a cached answer per namespace and visitor, so they are left out) and each page is
fetched over HTTP, one request at a time, timing from request to last byte:

- overview: the first page of 50 jobs (each with its last-20-runs strip and counts), a
  later keyset page, and a name filter;
- one job: the busy job (timeline capped at its latest 500 runs, next occurrences, a
  page of runs) and an ordinary one; an older page of the busy job's runs (keyset);
- one run, and a why-didn't-it-run answer.

Goal: p99 <= 200 ms for the overview and one-job pages.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import environment, queries, seed
from bench.report import format_table
from bench.stats import percentile
from pgsched.db import connection
from pgsched.ui import access, server

GOAL_SECONDS = 0.200
DEFINITIONS = 1_000
SPREAD_RUNS = 800_000
HOT_RUNS = 200_000


def _fetch(url: str) -> float:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            answer.read()
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"{url}: {error.code} {error.read().decode()[-300:]}") from None
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny scale, for a smoke run")
    parser.add_argument("--requests", type=int, default=200, help="requests per page (default 200)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    scale = 0.01 if args.quick else 1.0
    requests = 10 if args.quick else args.requests
    with environment.environment() as env:
        dsn = env.create_database("ui")
        started = time.perf_counter()
        with connection.connect(dsn) as conn:
            seed.definitions(
                conn,
                count=DEFINITIONS,
                cap=1,
                due=False,
                age=timedelta(days=200),
            )
            seed.history(conn, int(SPREAD_RUNS * scale))
            conn.execute(queries.get("ui_seed_hot_history"), {"count": int(HOT_RUNS * scale)})
            conn.execute(queries.get("vacuum_analyze_all"))
            total = conn.execute("SELECT count(*) AS n FROM pgsched.job_runs").fetchone()["n"]  # type: ignore[index]
            some_run = conn.execute("SELECT max(id) AS id FROM pgsched.job_runs").fetchone()["id"]  # type: ignore[index]
        seeded = time.perf_counter() - started
        pool = server.open_pool(dsn, size=4)
        running = server.serve_in_thread(server.build_app(pool, access.OpenAccess()), "127.0.0.1:0")
        base = f"http://127.0.0.1:{running.port}"
        pages = {
            "overview": ["/"],
            "overview, later page": ["/?after=bench/def-500"],
            "overview, name filter": ["/?name=def-9"],
            "one job, busy (1 run a minute)": ["/ns/bench/def-0"],
            "one job, ordinary": [f"/ns/bench/def-{n}" for n in (17, 333, 777)],
            "one job, older runs page": [
                f"/ns/bench/def-0?before={some_run - 100_000 * scale:.0f}"
            ],
            "one run": [f"/runs/{max(1, some_run - int(n * scale))}" for n in (1, 5000, 40_000)],
            "why didn't it run": [
                "/ns/bench/def-0/why?at="
                + time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 3 * 86400))
            ],
        }
        rows: list[dict[str, Any]] = []
        try:
            for paths in pages.values():
                for path in paths:  # warm up: connections, caches, imports
                    _fetch(base + path)
            for label, paths in pages.items():
                samples = [_fetch(base + random.choice(paths)) for _ in range(requests)]
                rows.append(
                    {
                        "page": label,
                        "requests": requests,
                        "p50_ms": round(percentile(samples, 0.5) * 1000, 1),
                        "p95_ms": round(percentile(samples, 0.95) * 1000, 1),
                        "p99_ms": round(percentile(samples, 0.99) * 1000, 1),
                        "max_ms": round(max(samples) * 1000, 1),
                    }
                )
        finally:
            running.stop()
            pool.close()
        context = {
            "runs": total,
            "definitions": DEFINITIONS + 0,
            "seed_seconds": round(seeded, 1),
            **environment.machine(dsn),
        }
    gated = [row for row in rows if row["page"].startswith(("overview", "one job"))]
    # The goal is about 1M runs and 200 requests a page: the quick run's p99 of 10 requests
    # over 10,000 runs says whether the pages answer, not whether the goal holds.
    met = None if args.quick else all(row["p99_ms"] <= GOAL_SECONDS * 1000 for row in gated)
    print(f"\n== ui: page latency with {total:,} runs, {DEFINITIONS:,} ScheduledJobs")
    print(format_table(list(rows[0]), rows))
    verdict = {True: "met", False: "NOT met", None: "not judged at --quick scale"}[met]
    print(f"goal: overview and one-job p99 <= {GOAL_SECONDS * 1000:.0f} ms: {verdict}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / ("ui-quick.json" if args.quick else "ui.json")
    out.write_text(
        json.dumps({"rows": rows, "goal_met": met, "context": context}, indent=2, default=str)
    )
    print(f"written {out}")
    return 1 if met is False else 0


if __name__ == "__main__":
    raise SystemExit(main())
