"""What a job kind receives (:class:`JobContext`) and how it is told to stop (:class:`Cancelled`).

Cancellation is cooperative: nothing interrupts a job between two statements. The job calls
``ctx.checkpoint()`` between steps it can safely stop after, and the checkpoint raises
:class:`Cancelled` when the run must stop. An uncooperative kill leaves "was the e-mail
sent? was half the batch written?" unanswerable; a checkpoint makes the stopping point a
place the job author chose.

:class:`Cancelled` derives from ``BaseException``, not ``Exception``, for the same reason
``asyncio.CancelledError`` does: a job's ``except Exception:`` around one step (log and
carry on) must not swallow the request to stop. It is also never a *failure*: the runner
records ``CANCELLED``, which is never retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

CancelCause = Literal["cancelled", "lease-lost", "terminated"]

_EXPLANATIONS: dict[CancelCause, str] = {
    "cancelled": "cancellation was requested for this run",
    "lease-lost": "the run's lease was lost (it was reaped or ended elsewhere; another"
    " attempt may already be running)",
    "terminated": "the runner received SIGTERM (the pod is being stopped)",
}


class Cancelled(BaseException):
    """Raised by ``checkpoint()``: stop now. ``cause`` says who asked.

    - ``cancelled``: a user or the operator cancelled the run (``pgsched.dev/cancel``,
      ``concurrencyPolicy: Replace``, deleting the ScheduledJob);
    - ``lease-lost``: the run no longer belongs to this runner (reaped after missed
      heartbeats, or ended by someone else) — whatever it does now is a zombie's work;
    - ``terminated``: the pod got SIGTERM (Job deleted after the cancel grace, node
      drain, eviction).
    """

    def __init__(self, cause: CancelCause) -> None:
        super().__init__(_EXPLANATIONS[cause])
        self.cause: CancelCause = cause


class RunLogger(logging.LoggerAdapter[logging.Logger]):
    """Prefixes every message with the run, and attaches it as record attributes
    (``pgsched_run_id``, ``pgsched_attempt``, ``pgsched_kind``) for structured handlers."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        kwargs["extra"] = {**extra, **kwargs.get("extra", {})}
        return f"[run {extra['pgsched_run_id']} attempt {extra['pgsched_attempt']}] {msg}", kwargs


def run_logger(kind: str, *, run_id: int, attempt: int) -> RunLogger:
    return RunLogger(
        logging.getLogger(f"pgsched.job.{kind}"),
        {"pgsched_run_id": run_id, "pgsched_attempt": attempt, "pgsched_kind": kind},
    )


@dataclass(frozen=True)
class JobContext:
    """Everything a job kind gets from the runner besides its own arguments.

    ``args`` is the raw argument object (``spec.job.args``); the job function also
    receives each argument as a keyword argument, already checked against its signature.
    """

    kind: str
    args: Mapping[str, Any]
    run_id: int
    attempt: int
    logger: RunLogger
    _checkpoint: Callable[[], None] = field(repr=False, compare=False)

    def checkpoint(self) -> None:
        """Raise :class:`Cancelled` if the run must stop; otherwise return at once.

        Cheap enough to call once per row: it reads the state the heartbeat thread keeps
        current, and asks the database itself only when that state is stale.
        """
        self._checkpoint()
