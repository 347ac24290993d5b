"""The pgsched job SDK: Python job kinds run by ``pgsched run`` inside your own image.

::

    from pgsched import sdk

    class BudgetExhausted(Exception): ...

    @sdk.job("nightly-report", retry_on=(TimeoutError,), never_retry_on=(BudgetExhausted,))
    def nightly_report(ctx: sdk.JobContext, *, days: int = 7) -> None:
        for day in range(days):
            ctx.checkpoint()          # raises sdk.Cancelled when the run must stop
            ctx.logger.info("day %s done", day)

The runner heartbeats from a background thread, calls the kind with ``spec.job.args`` as
keyword arguments, and records the outcome (fenced by the run's lease): ``COMPLETED``, or
``FAILED`` with the exception class as the reason and a retry hint from the kind's
exception lists, or ``CANCELLED`` after a mutating kind's compensation hook ran.
See ``docs/sdk.md`` for the full semantics.

This is the whole public API; everything else in ``pgsched`` is internal.
"""

from pgsched.sdk.arguments import InvalidArguments
from pgsched.sdk.context import CancelCause, Cancelled, JobContext
from pgsched.sdk.kinds import JobKind, RegistrationError, Registry, UnknownKind, job, registry

__all__ = [
    "CancelCause",
    "Cancelled",
    "InvalidArguments",
    "JobContext",
    "JobKind",
    "RegistrationError",
    "Registry",
    "UnknownKind",
    "job",
    "registry",
]
