"""``watch`` of runs: a stream of the changes after a resourceVersion (docs/runs-api.md).

A resourceVersion is a change's place in the order ``changes`` gives committed changes. A
watch reads the changes after its version every ``POLL_SECONDS`` (one indexed read of the
recent ones), reads those runs, and sends one event per change, each run as the change
left it (its status and reason), as the API server's watch does: ADDED for a run created by
the change, MODIFIED otherwise, each object carrying its change's place; BOOKMARK every ``BOOKMARK_SECONDS`` when asked
(``allowWatchBookmarks``), so a client resumes near where it stopped even when its runs
were quiet. A version older than the changes kept is 410 Expired: list again.

What it does not do, and says so (docs/runs-api.md): a watch without a resourceVersion
starts now and sends no initial ADDED for every existing run (history has no end: list
first, as kubectl and informers do). Runs are never deleted by a change (history
retention drops whole months): the only DELETED is a run leaving the phase a field
selector on ``status.phase`` asks for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from aiohttp import web

from pgsched.engine.models import TERMINAL_STATUSES, Run, RunStatus
from pgsched.k8s.runs_api import resources
from pgsched.k8s.runs_api.params import RUN_STATUSES, Fields
from pgsched.k8s.runs_api.resources import Obj, StoredRun
from pgsched.k8s.runs_api.store import Change, RunReader

log = logging.getLogger(__name__)


Batch = tuple[list[Change], dict[int, StoredRun]]

POLL_SECONDS = 0.25
BOOKMARK_SECONDS = 30.0
# A watch ends after a while, as the API server's do (--min-request-timeout, randomized so
# clients do not all come back at once): a client watches again from its last version.
MAX_WATCH_SECONDS = (1800.0, 3600.0)
# Changes read per round; a round that read a full batch reads again at once.
BATCH = 500


@dataclass(frozen=True)
class Watch:
    """What one watch request asks for, checked."""

    namespaces: list[str] | None
    scheduled_job: str | None
    fields: Fields
    after: int
    seconds: float
    bookmarks: bool
    objects: str | None  # Table rows' includeObject, None: plain Run objects


def seconds(timeout: str) -> float:
    """``timeoutSeconds`` if given and shorter than ours, else ours (randomized)."""
    longest = random.uniform(*MAX_WATCH_SECONDS)
    if timeout.isdigit() and int(timeout) > 0:
        return min(float(timeout), longest)
    return longest


def events(
    changes: list[Change], found: dict[int, StoredRun], watch: Watch, now: datetime
) -> list[Obj]:
    """One event per change, the run as of it (``as_of``); a note that changes nothing a
    Run shows (``LAUNCHING`` again with the same reason, a settled failure's
    ``NOT_RETRIED``) is sent once per batch, the run as the batch's status change before
    it left it (or as it is, when the batch has none).

    With a phase selector a run is ADDED when it enters the phase and DELETED (as it was)
    when it leaves it, as the API server does for an object that starts or stops matching a
    watch's field selector."""
    sent = []
    noted: set[int] = set()
    phase_change: dict[int, Change] = {}  # each run's last status change read so far
    for change in changes:
        item = found.get(change.run_id)
        if item is None:
            continue
        if change.status in RUN_STATUSES:
            phase_change[change.run_id] = change
        elif change.run_id in noted:
            continue
        else:
            noted.add(change.run_id)
        shown = dataclasses.replace(
            item, run=as_of(item.run, phase_change.get(change.run_id, change))
        )
        selected = _selected(shown, watch)
        left = _left(item, change)
        was_selected = _was_selected(selected, left, change, watch)
        if selected:
            kind = "MODIFIED" if was_selected else "ADDED"
        elif was_selected and left is not None:
            # Left the selected phase: DELETED, the run as it was, as the API server sends
            # an object that stopped matching a watch's field selector.
            kind, shown = "DELETED", left
        else:
            continue
        sent.append({"type": kind, "object": _body(shown, str(change.seq), watch, now)})
    return sent


def _left(item: StoredRun, change: Change) -> StoredRun | None:
    """The run as it was before a status change, when the change says what it was."""
    if change.previous is None or change.previous not in RUN_STATUSES:
        return None
    before = Change(change.seq, change.run_id, change.previous, None, False)
    return dataclasses.replace(item, run=as_of(item.run, before))


def _was_selected(selected: bool, left: StoredRun | None, change: Change, watch: Watch) -> bool:
    """Whether the watch had the run before this change: never before its creation; as now
    after a note (it changes no phase) or a change whose previous status is unknown;
    otherwise as the run was."""
    if change.created:
        return False
    if left is None:
        return selected
    return _selected(left, watch)


def _body(shown: StoredRun, version: str, watch: Watch, now: datetime) -> Obj:
    if watch.objects is None:
        return resources.run_object(shown, version)
    return resources.table(
        [shown], now=now, continue_token=None, objects=watch.objects, resource_version=version
    )


def as_of(run: Run, change: Change) -> Run:
    """The run as the change left it, as far as a Run shows it: its status and reason, and
    no end (nor a start, while queued) before it ended. A run read after two quick changes
    is shown twice, QUEUED then RUNNING, as each was committed."""
    if change.status not in RUN_STATUSES or change.status == run.status:
        return run
    status = cast(RunStatus, change.status)
    if status in TERMINAL_STATUSES:
        return dataclasses.replace(run, status=status, reason=change.reason)
    return dataclasses.replace(
        run,
        status=status,
        reason=change.reason,
        started_at=None if status == "QUEUED" else run.started_at,
        finished_at=None,
        exit_code=None,
        error=None,
    )


def bookmark(version: int) -> Obj:
    return {
        "type": "BOOKMARK",
        "object": {
            "apiVersion": resources.API_VERSION,
            "kind": resources.KIND,
            "metadata": {"resourceVersion": str(version)},
        },
    }


async def stream(
    request: web.Request,
    watch: Watch,
    reader: RunReader,
    call: Callable[[Callable[[], Batch]], Awaitable[Batch]],
    now: Callable[[], datetime],
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    ends = loop.time() + watch.seconds
    bookmark_at = loop.time() + BOOKMARK_SECONDS
    after = watch.after
    try:
        while loop.time() < ends and not _gone(request):
            changes, found = await call(functools.partial(_read, reader, watch, after))
            if changes:
                for event in events(changes, found, watch, now()):
                    await response.write(_line(event))
                after = changes[-1].seq
                if len(changes) >= BATCH:
                    continue
            if watch.bookmarks and loop.time() >= bookmark_at:
                await response.write(_line(bookmark(after)))
                bookmark_at = loop.time() + BOOKMARK_SECONDS
            await asyncio.sleep(POLL_SECONDS)
    except ConnectionResetError:
        pass  # the client went: nothing to tell it
    return response


def _read(reader: RunReader, watch: Watch, after: int) -> Batch:
    """The next changes, and their runs as they are now."""
    changes = reader.changes(
        namespaces=watch.namespaces,
        scheduled_job=watch.scheduled_job,
        after=after,
        limit=BATCH,
    )
    return changes, reader.by_ids(sorted({change.run_id for change in changes}))


def _selected(item: StoredRun, watch: Watch) -> bool:
    return selected(item, watch.scheduled_job, watch.fields)


def selected(item: StoredRun, scheduled_job: str | None, fields: Fields) -> bool:
    """Whether the run is one a label selector (its ScheduledJob) and a field selector ask for."""
    if scheduled_job is not None and item.scheduled_job != scheduled_job:
        return False
    if fields.statuses and item.run.status not in fields.statuses:
        return False
    if fields.run_id is not None and item.run.id != fields.run_id:
        return False
    return fields.name is None or item.name == fields.name


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _line(event: Any) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"
