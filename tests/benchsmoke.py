"""What the benchmark smoke tests share: a tiny-scale benchmark context."""

from __future__ import annotations

from pathlib import Path

from bench.context import Context
from bench.environment import Environment
from devenv.postgres import PostgresServer


def quick_context(postgres: PostgresServer, out_dir: Path) -> Context:
    """Every benchmark at its smallest scale, writing its results into ``out_dir``."""
    return Context(
        env=Environment(postgres),
        quick=True,
        rounds=1,
        seconds=0.3,
        out_dir=out_dir,
        snapshot_seconds=1.5,
    )
