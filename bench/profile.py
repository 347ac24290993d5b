"""``python -m bench.profile``: where one dispatcher claim spends its time.

Not a benchmark with a floor, the evidence behind ``bench/README.md``'s "What limits the
dispatcher": one process, batch 50, 1,000 definitions, a fresh queue per arm, and for each
way of claiming

- wall time, and CPU of this process and of its PostgreSQL backend, per call;
- statements per call and server execution time per statement (``pg_stat_statements``,
  loaded into this run's own throwaway server).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench import environment, queries, seed
from bench.report import format_table
from bench.workers import backend_cpu
from devenv.postgres import PostgresServer
from pgsched.db import connection
from pgsched.engine import dispatch, launcher

BATCH = 50
CALLS = 300


def main() -> int:
    server = PostgresServer(
        settings={
            "shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track": "all",
        }
    ).start()
    env = environment.Environment(server)
    try:
        dsn = env.create_database("profile")
        with connection.connect(dsn) as conn:
            conn.execute(queries.get("statements_extension"))
            seed.definitions(conn, count=1_000, cap=100_000, due=False)
            null = launcher.NullLauncher()
            owners = dispatch.Owners()  # kept between calls, as the tick keeps its own
            arms: dict[str, Callable[[], object]] = {
                "raw": lambda: conn.execute(queries.raw_claim(), {"batch": BATCH}).fetchall(),
                "dispatch.run_once": lambda: dispatch.run_once(
                    conn, null, batch_size=BATCH, owners=owners
                ),
                "dispatch.claim": lambda: dispatch.claim(conn, batch_size=BATCH),
                "dispatch.claim overshoot 1": lambda: dispatch.claim(
                    conn, batch_size=BATCH, overshoot=1
                ),
                "claim_for_dispatch, ids only": lambda: conn.execute(
                    queries.get("claim_ids_only"),
                    {"batch": BATCH, "overshoot": dispatch.DEFAULT_OVERSHOOT},
                ).fetchall(),
            }
            rows, details = [], []
            for name, call in arms.items():
                row, top = _profile(conn, name, call)
                rows.append(row)
                details.append((name, top))
        print(format_table(list(rows[0]), rows))
        for name, top in details:
            print(f"\n{name}: server time per call by statement")
            print(format_table(list(top[0]), top))
    finally:
        server.cleanup()
    return 0


def _profile(
    conn: connection.Connection, name: str, call: Callable[[], object]
) -> tuple[dict[str, object], list[dict[str, object]]]:
    seed.fresh_queue(conn, 40_000)
    conn.execute(queries.get("statements_reset"))
    backend = conn.info.backend_pid
    client, server = time.process_time(), backend_cpu(backend)
    started = time.perf_counter()
    for _ in range(CALLS):
        call()
    wall = time.perf_counter() - started
    client, server = time.process_time() - client, backend_cpu(backend) - server
    statements = conn.execute(queries.get("statement_profile")).fetchall()
    row = {
        "claim": name,
        "wall ms/call": wall / CALLS * 1000,
        "client CPU ms/call": client / CALLS * 1000,
        "backend CPU ms/call": server / CALLS * 1000,
        "statements/call": sum(s["calls"] for s in statements) / CALLS,
        "server exec ms/call": sum(s["total_exec_time"] for s in statements) / CALLS,
    }
    top = [
        {
            "calls/call": s["calls"] / CALLS,
            "exec ms/call": s["total_exec_time"] / CALLS,
            "statement": s["query"],
        }
        for s in statements[:6]
    ]
    return row, top


if __name__ == "__main__":
    sys.exit(main())
