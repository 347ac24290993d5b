"""``pgsched run``: execute one run of an SDK job kind inside the user's image.

It heartbeats *before* importing user code, so a slow import does not look like a dead pod
(``Orphaned``); then imports the job modules and checks the arguments against the kind's
signature, failing fast with ``retry_hint = never`` on a mistake another attempt would
repeat; calls the kind, whose ``ctx.checkpoint()`` raises :class:`~pgsched.sdk.Cancelled`
when the run must stop (a mutating kind's compensation then runs); and records the
outcome, fenced by the lease, and exits with the code that states it.

SIGTERM does not interrupt the job: it is one more reason for the next checkpoint to stop.
The run ends ``CANCELLED`` if a cancellation was requested too, else ``FAILED/Terminated``
(retried only with ``retryOn: [Terminated]``).

The steps and why their order matters: docs/architecture.md, "Running an SDK job".
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from pgsched import sdk
from pgsched.runner import outcome as outcomes
from pgsched.runner.checkpoint import CancellationWatch
from pgsched.runner.exit_codes import ExitCode
from pgsched.runner.heartbeat import HeartbeatLoop
from pgsched.runner.outcome import Outcome
from pgsched.runner.runapi_client import RunApiClient
from pgsched.runner.settings import JobSelection, RunnerSettings
from pgsched.sdk import arguments
from pgsched.sdk.context import run_logger
from pgsched.sdk.kinds import JobKind, Registry

log = logging.getLogger(__name__)

# Long enough for an in-flight heartbeat to finish or time out (REQUEST_TIMEOUT_SECONDS).
_STOP_SECONDS = 15.0


class SetupError(Exception):
    """The run cannot start: unimportable module, unknown kind or bad arguments."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def run(settings: RunnerSettings, *, registry: Registry = sdk.registry) -> ExitCode:
    assert settings.job is not None, "the SDK runner needs a job selection"
    # One client for every thread: each has a connection of its own (the loop's beats and
    # long polls, the checkpoints' checks and the final write here).
    client = RunApiClient(settings.run_api_url, settings.run_api_ca, settings.lease)
    loop = HeartbeatLoop(client, interval_seconds=settings.heartbeat_interval_seconds).start()
    watch = CancellationWatch(loop, client)
    restore = _on_sigterm(watch)
    try:
        result = _execute(settings, settings.job, registry, watch)
        # Stop beating first: a beat after our own final write would read "lost".
        loop.stop(timeout=_STOP_SECONDS)
        return _conclude(settings, client, result, loop)
    finally:
        restore()
        loop.stop(timeout=_STOP_SECONDS)
        client.close()


def prepare(selection: JobSelection, registry: Registry) -> tuple[JobKind, dict[str, object]]:
    """Import the modules, find the kind, check the arguments; raises :class:`SetupError`."""
    # Like `python -m`, let modules next to the working directory be found (WORKDIR /app).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in selection.modules:
        try:
            importlib.import_module(module)
        except Exception as error:
            raise SetupError(
                "JobModuleImportFailed",
                f"cannot import job module {module!r} (spec.job.modules / PGSCHED_JOB_MODULES):"
                f" {outcomes.describe_exception(error)}",
            ) from error
    try:
        kind = registry.get(selection.kind)
    except sdk.UnknownKind as error:
        imported = ", ".join(selection.modules) or "none"
        raise SetupError(
            "UnknownJobKind",
            f"{error} (imported modules: {imported}); check spec.job.kind, or list the module"
            " that registers it in spec.job.modules (example: modules: [myapp.jobs])",
        ) from None
    try:
        return kind, arguments.check(kind, selection.args)
    except sdk.InvalidArguments as error:
        raise SetupError("InvalidJobArguments", str(error)) from None


def _execute(
    settings: RunnerSettings, selection: JobSelection, registry: Registry, watch: CancellationWatch
) -> Outcome | None:
    """The run's outcome, or None when the lease was lost (there is nothing to record)."""
    try:
        kind, kwargs = prepare(selection, registry)
    except SetupError as error:
        log.error("run %s: %s", settings.run_id, error)
        return Outcome(
            "FAILED",
            ExitCode.CONFIGURATION,
            reason=error.reason,
            error=str(error),
            retry_hint="never",
        )
    ctx = sdk.JobContext(
        kind=kind.name,
        args=selection.args,
        run_id=settings.run_id,
        attempt=settings.attempt,
        logger=run_logger(kind.name, run_id=settings.run_id, attempt=settings.attempt),
        _checkpoint=watch.checkpoint,
    )
    log.info(
        "run %s: starting job kind %r (attempt %s, %s)",
        settings.run_id,
        kind.name,
        settings.attempt,
        kind.origin,
    )
    try:
        kind.function(ctx, **kwargs)
    except sdk.Cancelled as cancelled:
        return _cancelled(kind, ctx, cancelled, watch)
    except (Exception, SystemExit) as error:
        ctx.logger.error("failed", exc_info=error)
        hint = kind.retry_hint(error)
        return Outcome(
            "FAILED",
            ExitCode.FAILED,
            reason=type(error).__name__,
            error=outcomes.describe_exception(error),
            retry_hint=hint,
        )
    return Outcome("COMPLETED", ExitCode.COMPLETED)


def _cancelled(
    kind: JobKind, ctx: sdk.JobContext, cancelled: sdk.Cancelled, watch: CancellationWatch
) -> Outcome | None:
    ctx.logger.warning("stopping at a checkpoint: %s", cancelled)
    note = _compensate(kind, ctx, cancelled)
    cause = cancelled.cause
    if cause == "terminated":
        # Who sent SIGTERM? The operator, deleting the Job of a cancelled run, or the node.
        watch.refresh()
        cause = watch.cause() or cause
    if cause == "lease-lost":
        return None
    error = f"stopped at a checkpoint: {cancelled}; {note}"
    if cause == "cancelled":
        return Outcome("CANCELLED", ExitCode.CANCELLED, reason="Cancelled", error=error)
    return Outcome("FAILED", ExitCode.TERMINATED, reason="Terminated", error=error)


def _compensate(kind: JobKind, ctx: sdk.JobContext, cancelled: sdk.Cancelled) -> str:
    """Run the kind's compensation hook; returns what happened, for the run's error text."""
    if not kind.mutating:
        return "read-only kind, nothing to compensate"
    if kind.compensate is None:
        ctx.logger.warning("mutating kind without a compensation hook: partial writes stay")
        return "mutating kind without a compensation hook, partial writes were left as they are"
    ctx.logger.info("compensating")
    # The run is already stopping: checkpoints inside the hook must not interrupt it.
    quiet = dataclasses.replace(ctx, _checkpoint=lambda: None)
    try:
        kind.compensate(quiet, cancelled)
    except Exception as error:
        ctx.logger.error("compensation failed", exc_info=error)
        return f"compensation failed: {outcomes.describe_exception(error)}"
    ctx.logger.info("compensation completed")
    return "compensation completed"


def _conclude(
    settings: RunnerSettings, client: RunApiClient, result: Outcome | None, loop: HeartbeatLoop
) -> ExitCode:
    if result is None or loop.state == "lost":
        log.warning(
            "run %s: the lease was lost; nothing recorded (the run already ended elsewhere)",
            settings.run_id,
        )
        return ExitCode.LEASE_LOST
    recorded = outcomes.record(client, result, timeout_seconds=settings.finish_timeout_seconds)
    if recorded == "lease-lost":
        return ExitCode.LEASE_LOST
    return result.exit_code


def _on_sigterm(watch: CancellationWatch) -> Callable[[], object]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signals can only be handled in the main thread

    def handler(signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM received: stopping at the next checkpoint")
        watch.terminate()

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)
