"""``python -m bench [name ...] [--quick]``: run benchmarks, print tables, write results.

With no name, runs the issue-2 suite (throughput, latency, idle_tick, materialize). Each
name runs one benchmark; ``all`` runs every one. Results go to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from bench import environment, report
from bench.context import Benchmark, Context

# name -> module; the order is the order `all` runs them in.
BENCHMARKS = {
    "throughput": "bench.throughput",
    "latency": "bench.latency",
    "idle_tick": "bench.idle_tick",
    "materialize": "bench.materialize",
    "scaling": "bench.scaling",
    "peer": "bench.peer",
    "bloat": "bench.bloat",
    "locks": "bench.locks",
    "skew": "bench.skew",
    "notify_skew": "bench.notify_skew",
    "footprint": "bench.footprint",
    "history": "bench.history",
    "fleet": "bench.fleet",
    "stampede": "bench.stampede",
    "namespace_deletion": "bench.namespace_deletion",
    "run_api_connections": "bench.run_api_connections",
    "run_api_flood": "bench.run_api_flood",
    "runs_api_pages": "bench.runs_api_pages",
    "runs_api_kubectl": "bench.runs_api_kubectl",
}
ISSUE_2_SUITE = ["throughput", "latency", "idle_tick", "materialize"]


def load(name: str) -> Benchmark:
    return importlib.import_module(BENCHMARKS[name])  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="name",
        help=f"benchmarks to run: {', '.join(BENCHMARKS)} or all (default: the issue-2 suite)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny scale, seconds per benchmark")
    parser.add_argument(
        "--rounds",
        type=int,
        help="repetitions of every measurement (default: per benchmark, mostly 3)",
    )
    parser.add_argument("--seconds", type=float, help="throughput window per measurement (1.5)")
    parser.add_argument(
        "--snapshot-seconds", type=float, help="bloat: how long the old snapshot is held (180)"
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(part) for part in text.split(",")),
        default=(),
        help="fleet: ScheduledJobs per fleet, comma-separated (1000,10000,100000)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        help="run_api_connections: the measurement window; run_api_flood: all four phases",
    )
    parser.add_argument("--out", type=Path, default=report.RESULTS, help="results directory")
    args = parser.parse_args(argv)
    names = args.names or ISSUE_2_SUITE
    if names == ["all"]:
        names = list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    with environment.environment() as env:
        ctx = Context(
            env=env,
            quick=args.quick,
            rounds=args.rounds or (1 if args.quick else None),
            seconds=args.seconds or (0.4 if args.quick else 1.5),
            out_dir=args.out,
            snapshot_seconds=args.snapshot_seconds or (4.0 if args.quick else 180.0),
            sizes=args.sizes,
            minutes=args.minutes,
        )
        for name in names:
            run_one(name, ctx)
    return 0


def run_one(name: str, ctx: Context) -> report.Report:
    """Run one benchmark and write its results (also the smoke test's entry point)."""
    started = time.monotonic()
    machine = environment.machine(ctx.env.server.dsn())
    result = load(name).run(ctx)
    context = {
        "machine": machine,
        "load_average_after": machine_load(),
        "quick": ctx.quick,
        "rounds": ctx.rounds,
        "seconds": ctx.seconds,
        "duration_seconds": round(time.monotonic() - started, 1),
    }
    report.emit(result, out_dir=ctx.out_dir, context=context)
    print(f"  ({name} took {context['duration_seconds']}s)")
    return result


def machine_load() -> list[float]:
    import os

    return [round(value, 2) for value in os.getloadavg()]


if __name__ == "__main__":
    sys.exit(main())
