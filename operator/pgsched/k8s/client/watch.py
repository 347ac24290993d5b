"""List, then watch: how the operator sees one kind of object in one namespace.

The operator's memory must not grow with the number of objects it watches (100,000
ScheduledJobs in a few hundred MB), so nothing here keeps an object once it is handed over:
the first list comes in chunks, each handed to the consumer before the next is asked for;
then a watch from the list's ``resourceVersion``, with bookmarks, resumes after a reconnect
without listing again. ``410 Gone`` starts over with a fresh list (consumers are
idempotent); any other error backs off and the loop goes on: a watch never dies of the API
server (I7). Deletions need no bookkeeping: the objects whose deletion matters carry
pgsched's finalizer.

In full: docs/architecture.md, "List, then watch".
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pgsched.failures import FailureLog
from pgsched.k8s.client import api
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)

CHUNK = 500
# The server ends a watch after timeoutSeconds; spread so that watches started together
# do not all reconnect together (client-go takes 5-10 minutes the same way).
WATCH_SECONDS = (240.0, 360.0)
# A watch with bookmarks hears from the server about once a minute; past this, the
# connection is dead whatever the socket says.
READ_MARGIN_SECONDS = 30.0
# Between attempts after an error: short, because a failed attempt costs nothing (a refused
# connection) and the first one after an API server restart should come soon — Job
# outcomes wait for it.
BACKOFF_SECONDS = (0.5, 5.0)


@dataclass(frozen=True)
class Event:
    """``ADDED``, ``MODIFIED`` or ``DELETED``; every object of a list is ``ADDED`` and
    ``listed`` (seen on a start, or after a 410: a consumer may want to look at it afresh)."""

    type: str
    object: Obj
    listed: bool = False


class Expired(Exception):
    """410 Gone: the resourceVersion (or a list's continue token) is no longer served."""


class Watch:
    """List-then-watch ``path`` (a collection) until :meth:`stop`; hands over batches."""

    def __init__(
        self,
        kube: api.KubeApi,
        path: str,
        *,
        name: str,
        label_selector: str | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self.name = name
        self._kube = kube
        self._path = path
        self._selector = {"labelSelector": label_selector} if label_selector else {}
        self._chunk = chunk
        self._stopping = threading.Event()
        self._stream: api.Stream | None = None
        self._lock = threading.Lock()
        self.listed = threading.Event()  # a whole list was handed over (set once)
        self.lists = 0  # lists started, the first and every one after a 410

    def run(self, deliver: Callable[[Sequence[Event]], None]) -> None:
        """Until :meth:`stop`. ``deliver`` gets each list chunk and each watch event; an
        exception from it is a bug there, logged, and the objects are listed again."""
        failures = FailureLog(log, f"watching {self.name}")
        version: str | None = None
        delay = BACKOFF_SECONDS[0]
        while not self._stopping.is_set():
            try:
                if version is None:
                    version = self._list(deliver)
                    if version is None:
                        break  # stopped while listing
                    self.listed.set()
                version = self._watch(deliver, version)
                failures.succeeded()
                delay = BACKOFF_SECONDS[0]
            except Expired:
                log.info("%s: resourceVersion %s expired; listing again", self.name, version)
                version = None
            except (api.ApiError, ValueError, OSError) as error:
                if self._stopping.is_set():
                    break
                failures.failed(str(error), transient=_transient(error))
                self._stopping.wait(delay * random.uniform(0.5, 1.0))
                delay = min(BACKOFF_SECONDS[1], delay * 2)
            except Exception:
                log.exception("%s: handing over objects failed; listing again", self.name)
                version = None
                self._stopping.wait(delay)
                delay = min(BACKOFF_SECONDS[1], delay * 2)

    def list_once(self, deliver: Callable[[Sequence[Event]], None]) -> bool:
        """Every object once, handed over as a list's (``listed``), tried again with backoff
        after an error; False if :meth:`stop` came first."""
        failures = FailureLog(log, f"listing {self.name}")
        delay = BACKOFF_SECONDS[0]
        while not self._stopping.is_set():
            try:
                listed = self._list(deliver) is not None
                failures.succeeded()
                return listed
            except Expired:
                continue  # the continue token expired between chunks: from the start
            except (api.ApiError, ValueError, OSError) as error:
                failures.failed(str(error), transient=_transient(error))
            self._stopping.wait(delay * random.uniform(0.5, 1.0))
            delay = min(BACKOFF_SECONDS[1], delay * 2)
        return False

    def stop(self) -> None:
        """End :meth:`run` (or :meth:`list_once`) at once, even while it waits for the
        server."""
        self._stopping.set()
        with self._lock:
            if self._stream is not None:
                self._stream.close()

    def _list(self, deliver: Callable[[Sequence[Event]], None]) -> str | None:
        """Every object, chunk by chunk; the list's resourceVersion (None: stopped)."""
        self.lists += 1
        token: str | None = None
        while not self._stopping.is_set():
            params = {**self._selector, "limit": self._chunk, "continue": token}
            try:
                answer = self._kube.get(self._path, **params)
            except api.ApiError as error:
                if error.status == 410:
                    raise Expired from None
                raise
            items = answer.get("items") or []
            deliver([Event("ADDED", item, listed=True) for item in items])
            del items
            metadata = answer.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                return str(metadata["resourceVersion"])
        return None

    def _watch(self, deliver: Callable[[Sequence[Event]], None], version: str) -> str:
        """One watch request, from ``version`` to the server's end of it; the last
        resourceVersion seen."""
        seconds = random.uniform(*WATCH_SECONDS)
        params = {
            **self._selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": int(seconds),
        }
        try:
            stream = self._kube.stream(
                self._path, params=params, read_timeout=seconds + READ_MARGIN_SECONDS
            )
        except api.ApiError as error:
            if error.status == 410:
                raise Expired from None
            raise
        with self._lock:
            if self._stopping.is_set():
                stream.close()
            self._stream = stream
        try:
            for line in stream:
                kind, body = line.get("type"), line.get("object") or {}
                if kind == "ERROR":
                    if body.get("code") == 410:
                        raise Expired
                    raise api.ApiError("GET", self._path, int(body.get("code") or 0), body)
                version = str(body.get("metadata", {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    deliver([Event(kind, body)])
        finally:
            with self._lock:
                self._stream = None
        return version


def _transient(error: Exception) -> bool:
    """The server could not answer now (unreachable, 429, 5xx) rather than refused."""
    return isinstance(error, OSError) or (isinstance(error, api.ApiError) and error.unavailable)
