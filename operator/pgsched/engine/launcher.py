"""What dispatch hands claimed runs to. The engine knows only this protocol.

The Kubernetes launcher (``pgsched.k8s.jobside.launcher``) creates a Job per run; tests use a
recording launcher; benchmarks use :class:`NullLauncher`. ``launch`` is called after the
claim committed and outside any transaction or lock, so a slow API server delays launches
but never holds up other claimers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from pgsched.engine.models import Definition, Run

# The reason of a launch the platform refused for the run's own fault (the default below).
LAUNCH_FAILED = "LaunchFailed"


class LaunchError(Exception):
    """The run could not be started; it is failed with ``reason`` (by default
    ``LaunchFailed``; a launcher may name a more precise one of the vocabulary, such as
    ``PodSecurityRejected``)."""

    def __init__(self, message: str, *, reason: str = LAUNCH_FAILED) -> None:
        super().__init__(message)
        self.reason = reason


class LaunchDeferred(Exception):
    """The run could not be launched because the platform is away (the API server
    unreachable, or answering 5xx or 429 after the client's own retries): not the run's
    fault. Dispatch puts it back to QUEUED, unclaimed and its attempt unspent; it is claimed
    again at a later tick, until its starting deadline (if any) skips it."""


@dataclass(frozen=True)
class Adopted:
    """The run's workload was already there, started under an earlier claim of the run
    whose commit the database lost, and the launcher gave the run that claim's lease back
    (``lease.adopt``, fenced on the current one): record ``handle`` under ``lease_token``."""

    handle: str
    lease_token: UUID


class Launcher(Protocol):
    """Optionally with ``parallelism: int``: how many launches dispatch may run at once
    (from a thread pool; ``launch`` must then be thread-safe). Without it, one at a time.

    Optionally with ``keeps_outcomes: bool``: True when a launched workload's outcome is
    also recorded outside the database (a Job's status) and the launcher's side reads it
    back. The reaper then never fails a silent run as dead: it marks it as awaiting that
    verdict (see ``reap``), because a worker that stopped heartbeating may simply have
    finished while nobody could see it (I8).

    Optionally with ``records_every_launch: bool``: True when every launch returns a handle
    and ``launch`` is idempotent per run *and lease* (the same workload, not a second one).
    A RUNNING run with no handle and no heartbeat some time after its claim was then never
    launched (its claimant stopped in between), and the tick launches it again
    (``reap.ReapResult.unlaunched``). Without it such a run waits for its orphan timeout."""

    def launch(self, run: Run, definition: Definition) -> str | Adopted | None:
        """Start the run's workload; return a handle to record (the Job name) or None, or
        :class:`Adopted` when it kept the workload of an earlier claim of the run.

        Must be idempotent per run id: after a crash the same run may be launched again.
        Raise :class:`LaunchError` (or any exception) if it cannot be started, and
        :class:`LaunchDeferred` if it cannot be started *now* through no fault of its own.
        """
        ...


class NullLauncher:
    """Launches nothing. For benchmarks of the claim path and engine-only use."""

    def launch(self, run: Run, definition: Definition) -> str | None:
        return None
