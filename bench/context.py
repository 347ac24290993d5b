"""What a benchmark gets to run with, and the shape every benchmark module has.

Each benchmark is a module with ``NAME``, ``TITLE`` and ``run(ctx) -> Report``; the
command line (``python -m bench``) builds one :class:`Context` for all selected ones, so
they share one PostgreSQL server but each makes its own database.

The Kubernetes benchmarks that run pods start a control plane with the machine's one node
of their own, unless the context gives them one (``cluster``, with its node and pgsched's
CRDs: the smoke tests give the session's shared cluster, so those run beside other tests
instead of alone): then each part works in fresh namespaces of its own (``bench.kube``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.environment import Environment
from bench.report import Report
from devenv.controlplane import ControlPlane


@dataclass(frozen=True)
class Context:
    env: Environment
    quick: bool = False
    rounds: int | None = None  # None: each benchmark's own default (usually 3)
    seconds: float = 1.5  # one throughput measurement window
    out_dir: Path = field(default_factory=lambda: Path(__file__).parent / "results")
    snapshot_seconds: float = 180.0  # bloat: how long the old snapshot is held
    plots: bool = True
    sizes: tuple[int, ...] = ()  # fleet: the fleet sizes (empty: the benchmark's own)
    minutes: float | None = None  # run_api_*: the measurement's length (None: its own)
    cluster: ControlPlane | None = None  # None: a control plane of their own (see above)
    # On a control plane of their own, the namespace; on a given one, the start of the
    # name of each fresh namespace.
    namespace: str = "bench"

    def rounds_or(self, default: int) -> int:
        return self.rounds if self.rounds is not None else default


class Benchmark(Protocol):
    NAME: str
    TITLE: str

    def run(self, ctx: Context) -> Report: ...
