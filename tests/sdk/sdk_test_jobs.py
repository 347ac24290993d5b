"""Job kinds for SDK tests: behaviours the examples do not exercise on purpose.

Imported by ``pgsched run`` children (``PGSCHED_JOB_MODULES=sdk_test_jobs``), so they are
registered exactly as a user's module would be.
"""

from __future__ import annotations

import time
from pathlib import Path

from pgsched import sdk


class TransientError(Exception):
    """Allowed to retry."""


class FlakyNetwork(TransientError):
    """A subclass of an allowed type: retried too."""


class BudgetExhausted(TransientError):
    """Denied, although it is also a TransientError: the deny list wins."""


class DailyBudgetExhausted(BudgetExhausted):
    """A subclass of a denied type: denied too."""


class Unlisted(Exception):
    """On neither list: the definition's retryOn decides."""


ERRORS: dict[str, type[Exception]] = {
    error.__name__: error
    for error in (
        TransientError,
        FlakyNetwork,
        BudgetExhausted,
        DailyBudgetExhausted,
        Unlisted,
        TimeoutError,
    )
}


@sdk.job("fail", retry_on=(TransientError, TimeoutError), never_retry_on=(BudgetExhausted,))
def fail(ctx: sdk.JobContext, *, error: str, message: str = "it broke") -> None:
    ctx.logger.info("raising %s", error)
    raise ERRORS[error](message)


@sdk.job("steps")
def steps(ctx: sdk.JobContext, *, count: int, seconds: float, progress: str) -> None:
    """``count`` steps of ``seconds`` each, a checkpoint before each; progress in a file."""
    progress_file = Path(progress)
    for step in range(count):
        ctx.checkpoint()
        progress_file.write_text(str(step))
        time.sleep(seconds)
    progress_file.write_text("done")


def undo_badly(ctx: sdk.JobContext, cancelled: sdk.Cancelled) -> None:
    raise RuntimeError("the undo log is gone")


@sdk.job("fragile-undo", mutating=True, compensate=undo_badly)
def fragile_undo(ctx: sdk.JobContext, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.checkpoint()
        time.sleep(0.05)


@sdk.job("wait-for-file")
def wait_for_file(ctx: sdk.JobContext, *, path: str) -> None:
    """Waits without ever calling checkpoint(): a job that cannot notice it was reaped."""
    ctx.logger.info("waiting for %s", path)
    while not Path(path).exists():
        time.sleep(0.05)
    ctx.logger.info("done waiting")
