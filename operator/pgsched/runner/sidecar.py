"""``pgsched heartbeat``: the native sidecar that keeps an arbitrary container's run alive.

The operator injects it next to workloads that are not SDK jobs (an init container with
``restartPolicy: Always``). It heartbeats the run with the shared loop and, when the run
must stop, tells the workload with a file on a shared ``emptyDir``
(``PGSCHED_CANCEL_FILE``), the only way that needs nothing from the workload's image.

It never writes a terminal status: the outcome is visible to the operator's Job watch, not
inside the pod, and terminal statuses are final (I4). It records the one fact it knows,
that the workload ended (the run API's ``workload-ended``). It does not exit on its own, because
kubelet restarts a native sidecar that exits; it waits for SIGTERM, and announces when its
handler is installed (:func:`announce_listening`) so the workload waits for it.

Why each of these: docs/architecture.md, "The heartbeat sidecar".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from pgsched import names
from pgsched.db import clock
from pgsched.engine.lease import LeaseState
from pgsched.runner import patience, workload_exit
from pgsched.runner.heartbeat import HeartbeatLoop
from pgsched.runner.runapi_client import RunApiClient
from pgsched.runner.settings import RunnerSettings

log = logging.getLogger(__name__)

_WORDS: dict[LeaseState, str] = {"cancel_requested": "cancelled", "lost": "lease-lost"}


def run(settings: RunnerSettings, stop: threading.Event) -> int:
    """Heartbeat until ``stop`` is set (SIGTERM); returns the exit code, always 0."""
    client = RunApiClient(settings.run_api_url, settings.run_api_ca, settings.lease)
    loop = HeartbeatLoop(
        client,
        interval_seconds=settings.heartbeat_interval_seconds,
        on_change=lambda state: signal_workload(settings.cancel_file, state),
    ).start()
    log.info(
        "run %s: heartbeating every %gs; the cancel file is %s",
        settings.run_id,
        settings.heartbeat_interval_seconds,
        settings.cancel_file,
    )
    ended = _EndNote(client)
    if settings.shared_process_namespace:
        workload_exit.start(ended.note, stop)
    stop.wait()
    # Note the end first, only then wait for a beat in flight (up to a request timeout): a
    # run asked to stop ends CANCELLED at this note (sql/functions/workload_ended_pinned.sql)
    # and a Replace's next run waits for it. No beat starts after the flag is set.
    loop.stop(timeout=0)
    ended.note()
    loop.stop(timeout=settings.heartbeat_interval_seconds + 10)
    log.info("run %s: sidecar stopped", settings.run_id)
    return 0


def announce_listening(settings: RunnerSettings) -> None:
    """Create the listening file next to the cancel file, once SIGTERM has a handler.

    The Job's postStart hook waits for it before kubelet starts the workload: a PID 1
    without a handler never sees SIGTERM, so a workload that ended sooner would leave the
    sidecar running until the pod's grace period ran out. A failure is logged (the hook
    gives up after 30 s and the workload starts anyway)."""
    path = settings.cancel_file.with_name(names.HEARTBEAT_LISTENING_FILE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as error:
        log.error("cannot create %s (the workload starts 30 s late): %s", path, error)


class _EndNote:
    """The workload's end, noted once: when the sidecar sees its processes end (a shared
    process namespace, :mod:`pgsched.runner.workload_exit`) or at SIGTERM, whichever
    comes first."""

    def __init__(self, client: RunApiClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._noted = False

    def note(self) -> None:
        with self._lock:
            if not self._noted:
                self._noted = True
                mark_ended(self._client)


# How long the sidecar keeps trying to note the workload's end while the run API is
# away: inside the pod's default termination grace (30 s), after which kubelet kills it.
END_NOTE_TIMEOUT_SECONDS = 15.0


def mark_ended(
    client: RunApiClient,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Tell the engine the workload ended, patiently (``pgsched.runner.patience``), on the
    calling thread's connection, closed afterwards (the watch of the workload's processes
    calls this from a thread of its own): without the note, a cancellation that came after
    the end can be told from one that stopped the work only by the end its pod reports, to
    the second. A failure is logged (the operator still reads the Job, only with less to go
    on while the API server is away)."""
    try:
        tried = patience.write(
            client.workload_ended,
            what="noting that the workload ended",
            run_id=client.run_id,
            timeout_seconds=END_NOTE_TIMEOUT_SECONDS,
            clock=clock,
            sleep=sleep,
        )
    except Exception as error:  # logged: the sidecar exits 0 whatever happens
        log.warning("run %s: could not note that the workload ended: %s", client.run_id, error)
        return
    finally:
        client.close()
    if tried.error is not None:
        log.warning(
            "run %s: could not note that the workload ended: %s", client.run_id, tried.error
        )
    elif tried.value:
        log.info("run %s: noted that the workload ended", client.run_id)


def signal_workload(path: Path, state: LeaseState, *, now: datetime | None = None) -> None:
    """Write the cancel file for ``state``; a failure is logged (the heartbeat goes on)."""
    word = _WORDS.get(state)
    if word is None:
        return
    at = (now or clock.local()).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(f"{word} {at}\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        log.error("cannot write the cancel file %s: %s", path, error)
        return
    # A cancellation is routine; a lost lease means the run was reaped or ended elsewhere.
    log.log(
        logging.INFO if state == "cancel_requested" else logging.WARNING,
        "wrote %r to %s",
        word,
        path,
    )
