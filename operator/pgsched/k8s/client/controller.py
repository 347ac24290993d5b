"""A controller: watches hand objects to a bounded work queue that worker threads serve.

Every resource the operator follows is handled in this one shape (ScheduledJobs, our
Jobs, ConcurrencyPools; the ScheduledJobs' writes are a second queue served the same way):

- one :class:`~pgsched.k8s.client.watch.Watch` per namespace (or one for all) runs on its own
  thread; ``select`` decides there, on the body alone, whether an event is work and under
  which key — nothing else runs on the watch's thread, so a slow handler slows only its
  queue, and the queue's bound paces the watch;
- ``workers`` threads take keys from the :class:`~pgsched.k8s.client.workqueue.WorkQueue` (one
  worker per key at a time) and call ``handle``, which returns None when done or the
  seconds after which to try again; an unexpected exception is logged and retried later,
  so no object is dropped and no thread dies of one (I7).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

import psycopg

from pgsched import metrics
from pgsched.k8s.client import api
from pgsched.k8s.client import watch as watching
from pgsched.k8s.client.workqueue import WorkQueue

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# After an unexpected exception (a bug): try the object again this much later.
BUG_RETRY_SECONDS = 30.0
# After a database or API error (an outage, a conflict): this much later.
RETRY_SECONDS = 5.0


def by_uid(event: watching.Event) -> tuple[str, watching.Event]:
    """The work key of an object's events: its uid (ScheduledJobs, pools, calendars)."""
    return str(event.object["metadata"]["uid"]), event


def retry_later(what: str, error: psycopg.Error | api.ApiError, logger: logging.Logger) -> float:
    """A handler met a database or API error handling ``what``: counted (database errors)
    and logged; the seconds after which its key is tried again."""
    if isinstance(error, psycopg.Error):
        metrics.DB_ERRORS.labels("handlers").inc()
        kind = "database"
    else:
        kind = "Kubernetes API"
    logger.warning("%s: %s error, will retry: %s", what, kind, error)
    return RETRY_SECONDS


class Workers(Generic[K, V]):
    """``count`` threads serving ``queue`` with ``handle``."""

    def __init__(
        self,
        name: str,
        queue: WorkQueue[K, V],
        handle: Callable[[K, V], float | None],
        *,
        count: int,
    ) -> None:
        self.name = name
        self.queue = queue
        self._handle = handle
        self._threads = [
            threading.Thread(target=self._work, name=f"pgsched-{name}-{i}", daemon=True)
            for i in range(count)
        ]
        metrics.WORK_QUEUE.labels(name).set_function(lambda: len(queue))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        self.queue.close()
        for thread in self._threads:
            thread.join(timeout=timeout)

    def alive(self) -> bool:
        return all(thread.is_alive() for thread in self._threads)

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            key, value = item
            try:
                retry_in = self._handle(key, value)
            except Exception:
                log.exception("%s: handling %s failed; trying again later", self.name, key)
                retry_in = BUG_RETRY_SECONDS
            self.queue.done(key, value, retry_in=retry_in)


class Controller(Generic[K, V]):
    """``watches`` → ``select`` → a queue of ``capacity`` keys → ``handle`` on workers."""

    def __init__(
        self,
        name: str,
        watches: Sequence[watching.Watch],
        *,
        select: Callable[[watching.Event], tuple[K, V] | None],
        handle: Callable[[K, V], float | None],
        workers: int,
        capacity: int,
        merge: Callable[[V, V], V] | None = None,
    ) -> None:
        self.name = name
        self.watches = list(watches)
        self._select = select
        self.queue: WorkQueue[K, V] = WorkQueue(capacity=capacity, merge=merge)
        self.workers = Workers(name, self.queue, handle, count=workers)
        self._threads = [
            threading.Thread(
                target=item.run,
                args=(self.deliver,),
                name=f"pgsched-watch-{item.name}",
                daemon=True,
            )
            for item in self.watches
        ]

    def start(self) -> None:
        self.workers.start()
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        for item in self.watches:
            item.stop()
        self.workers.stop(timeout)
        for thread in self._threads:
            thread.join(timeout=timeout)

    def alive(self) -> bool:
        return self.workers.alive() and all(thread.is_alive() for thread in self._threads)

    def listed(self) -> bool:
        """Every watch has listed its objects once (and handed them to the queue)."""
        return all(item.listed.is_set() for item in self.watches)

    def deliver(self, events: Sequence[watching.Event]) -> None:
        """Hand events over as a watch does (also a namespace's catch-up list)."""
        for event in events:
            selected = self._select(event)
            if selected is not None:
                self.queue.put(*selected)
