"""``python -m bench.cli_startup [--rounds 10]``: how long a ``pgsched`` command takes to answer.

Not a benchmark with a baseline: an absolute goal (well under half a second for
``--help``, ``next`` and ``runs``) and the evidence for lazy imports in ``pgsched.cli.main``.
Each command runs ``--rounds`` times as a fresh process, as a person would start it
(``python -m pgsched.cli.main``, what the ``pgsched`` script runs); the table gives the median
and the fastest wall time, how many modules the process imported, and which of the heavy
libraries among them (measured in one more run with ``-X importtime``). ``runs`` lists the
runs of a ScheduledJob that has none yet, on this run's own throwaway server, so its time
includes connecting; once with ``-n`` and once with the namespace from a kubeconfig's
context. Run it with ``PYTHONPATH`` pointing at another checkout's ``operator/`` to
measure that one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import environment, seed
from bench.report import format_table
from bench.stats import median
from pgsched.db import connection

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: bench
contexts: [{name: bench, context: {cluster: k, user: u, namespace: bench}}]
clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {token: t}}]
"""
HEAVY = ("kubernetes", "psycopg_pool", "aiohttp", "prometheus_client", "dateutil", "psycopg")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10, help="runs of each command (10)")
    args = parser.parse_args(argv)
    with environment.environment() as env:
        dsn = env.create_database("cli_startup")
        with connection.connect(dsn) as conn:
            seed.definitions(conn, count=1, cap=1, due=False)
        commands = {
            "pgsched --help": ["--help"],
            "pgsched next --cron ...": ["next", "--cron", "30 8 * * MON-FRI", "-n", "3"],
            "pgsched runs SJ -n NS": ["runs", "def-0", "--namespace", "bench", "--dsn", dsn],
            "pgsched runs SJ": ["runs", "def-0", "--dsn", dsn],
        }
        with tempfile.TemporaryDirectory() as home:
            # `runs SJ` takes its namespace from the kubeconfig's context, as people use it.
            kubeconfig = Path(home) / "config"
            kubeconfig.write_text(KUBECONFIG)
            env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
            rows = [
                _measure(name, argv, env=env, rounds=args.rounds) for name, argv in commands.items()
            ]
    print(f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds each")
    print(format_table(list(rows[0]), rows))
    return 0


def _measure(name: str, argv: list[str], *, env: dict[str, str], rounds: int) -> dict[str, object]:
    command = [sys.executable, "-m", "pgsched.cli.main", *argv]
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        seconds.append(time.perf_counter() - started)
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *command[1:]], env=env, check=True, capture_output=True
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.decode().splitlines()}
    return {
        "command": name,
        "median s": round(median(seconds), 3),
        "fastest s": round(min(seconds), 3),
        "modules": len(imported),
        "heavy imports": " ".join(lib for lib in HEAVY if lib in imported) or "-",
    }


if __name__ == "__main__":
    sys.exit(main())
