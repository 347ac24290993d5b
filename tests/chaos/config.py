"""What a chaos run does and for how long: CI defaults, overridden from the environment.

- ``PGSCHED_CHAOS_MINUTES``: chaos duration (the CI default is a bit over a minute per
  variant; ``make chaos-long MINUTES=10`` sets it);
- ``PGSCHED_CHAOS_SEED``: replay a run's seed (printed in every summary and report). The
  seed fixes the workload (definitions, caps, schedules, job durations per run id) and the
  fault plan (kinds, order, gaps, targets drawn); the operating system's timing still
  differs between replays, so a replay explores the same neighbourhood, not the same path;
- ``PGSCHED_CHAOS_REPORT_DIR``: where JSON reports go (default ``.cache/chaos``).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]


def chaos_seconds(default: float) -> float:
    minutes = os.environ.get("PGSCHED_CHAOS_MINUTES")
    return float(minutes) * 60 if minutes else default


def chaos_seed() -> int:
    seed = os.environ.get("PGSCHED_CHAOS_SEED")
    return int(seed) if seed else random.SystemRandom().randrange(1, 2**31)


def _report_dir() -> Path:
    return Path(os.environ.get("PGSCHED_CHAOS_REPORT_DIR") or ROOT / ".cache" / "chaos")


@dataclass(frozen=True)
class ChaosConfig:
    variant: str
    seconds: float
    seed: int = field(default_factory=chaos_seed)
    # Seconds between two faults (drawn uniformly).
    fault_gap: tuple[float, float] = (3.0, 8.0)
    # How long a paused replica or job stays stopped.
    pause_seconds: tuple[float, float] = (2.0, 10.0)
    drain_timeout: float = 180.0
    # How long the cluster variant's API server outages last (``apiserver_outage``).
    api_outage_seconds: tuple[float, float] = (15.0, 30.0)
    # How long every operator replica stays down at once (``replicas_down``): longer than
    # the workload's heartbeat timeout, so every pod's heartbeats fail for longer than it.
    replicas_down_seconds: tuple[float, float] = (12.0, 20.0)
    # None: every fault kind of the variant; otherwise only these.
    fault_kinds: tuple[str, ...] | None = None
    # A safeguard switched off on purpose (self-tests only): see ``planted`` in the drivers.
    planted: str | None = None
    # Faults the run must have injected to mean anything: past ``seconds`` the driver goes
    # on injecting until it has, for at most ``seconds`` more. Slow faults (a failover
    # waits for a workload to start, then for its lag) may not fit twice in a CI-length
    # run on a loaded machine (seen: one failover in 90 s, at 55 s).
    min_faults: int = 0
    # Kinds the run must have injected (each at least once): past ``seconds`` the driver
    # goes on injecting until it has, for at most ``seconds`` more, and raises
    # ``faults.HarnessError`` if one is still missing (a check built on a fault that never
    # happened proves nothing). Each must be one of the run's kinds.
    required_faults: tuple[str, ...] = ()
    report_dir: Path = field(default_factory=_report_dir)

    @property
    def stall_slack_seconds(self) -> float:
        """How late the reaper may be: nobody reaps while the leader is paused (it holds the
        lock) or the database is down, plus a margin for ticks on a loaded machine."""
        return self.pause_seconds[1] + 20.0
