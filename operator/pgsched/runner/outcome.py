"""The end of a run: what the job's result means, and writing it — fenced, and patiently.

The terminal write goes through the run API's ``finish`` (``pgsched.finish_run``), which
updates the row only while it is still ``RUNNING`` under our lease. So a runner that was
reaped while it worked (a zombie) changes nothing, and learns it: :func:`record` returns
``lease-lost``.

The run API may be briefly away exactly when the job ends (an operator rollout, a database
failover). The write is then retried (``pgsched.runner.patience``) for up to
``PGSCHED_FINISH_TIMEOUT_SECONDS``. If the outcome cannot be written the runner still exits
with the code that states it (see ``exit_codes``), so the operator's Job watch can record
it instead.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pgsched.engine.lease import FinalStatus
from pgsched.runner import patience
from pgsched.runner.exit_codes import ExitCode
from pgsched.runner.runapi_client import RunApiClient
from pgsched.sdk.kinds import RetryHint

log = logging.getLogger(__name__)

Recorded = Literal["recorded", "lease-lost", "unrecorded"]

# Enough for the message and the innermost frames; the full traceback is in the pod log.
MAX_ERROR_CHARS = 4000
TRACEBACK_FRAMES = 3


@dataclass(frozen=True)
class Outcome:
    status: FinalStatus
    exit_code: ExitCode
    reason: str | None = None
    error: str | None = None
    retry_hint: RetryHint | None = None


def describe_exception(error: BaseException) -> str:
    """``Type: message`` and the innermost frames, short enough for the run row."""
    frames = traceback.extract_tb(error.__traceback__)[-TRACEBACK_FRAMES:]
    text = f"{type(error).__name__}: {error}"
    if frames:
        text += "\n\nTraceback (innermost frames):\n" + "".join(traceback.format_list(frames))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 15] + "\n[... truncated]"
    return text.rstrip()


def record(
    client: RunApiClient,
    outcome: Outcome,
    *,
    timeout_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Recorded:
    run_id = client.run_id
    tried = patience.write(
        lambda: client.finish(
            outcome.status,
            reason=outcome.reason,
            error=outcome.error,
            exit_code=int(outcome.exit_code),
            retry_hint=outcome.retry_hint,
        ),
        what=f"recording {outcome.status}",
        run_id=run_id,
        timeout_seconds=timeout_seconds,
        clock=clock,
        sleep=sleep,
    )
    if tried.error is not None:
        if tried.error.transient:
            log.error(
                "run %s: could not record %s after %s attempts (%s); the exit code %s"
                " states the outcome",
                run_id,
                outcome.status,
                tried.attempts,
                tried.error,
                int(outcome.exit_code),
            )
        else:
            log.error(
                "run %s: recording %s failed and will not succeed by retrying: %s",
                run_id,
                outcome.status,
                tried.error,
            )
        return "unrecorded"
    if tried.value:
        log.info(
            "run %s: recorded %s%s",
            run_id,
            outcome.status,
            f" ({outcome.reason})" if outcome.reason else "",
        )
        return "recorded"
    if tried.attempts > 1:
        # A write that failed on a connection error may have committed all the same (the
        # answer was lost, not the commit): the retry then finds the run ended — by us.
        # Exiting LEASE_LOST would make the Job say "failed" where our own write may
        # have said COMPLETED; should that write be lost (an asynchronous failover),
        # the operator reads the Job. So the exit code keeps stating the outcome.
        log.warning(
            "run %s: the run had already ended when %s was retried: most likely by the"
            " earlier attempt, whose answer was lost",
            run_id,
            outcome.status,
        )
        return "recorded"
    return "lease-lost"
