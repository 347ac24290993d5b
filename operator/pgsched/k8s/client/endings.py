"""Namespaces seen being deleted, remembered: a namespace's deletion cannot be undone.

When a namespace of 200 running runs is deleted, every run ends and every ScheduledJob's
finalizer runs at once, and each used to ask the API server whether the namespace was
going (a run it stopped is cancelled, not failed: ``k8s.jobside.outcomes``), while the
publisher posted Events the API server refuses in a terminating namespace: about 700
requests for nothing, taken from the budget every other namespace's statuses share
(``bench namespace_deletion``: another namespace's status lag p99 25-33 times its quiet
value).

A namespace seen Terminating stays so until it is gone, so it is remembered with the
instant its deletion began (its ``deletionTimestamp``, or when a refusal said so). An
object created before that instant belongs to the namespace that is going: answered
without a request. One created after belongs to a namespace of the same name created
since (nothing can be created in a terminating namespace): asked again. Shared by every
view of one client (``KubeApi.endings``).

A sighting from the Namespace watch (label mode, ``k8s.serve.served``) is ``watched``: the
watch says when the namespace is gone, so it is kept until then however long the deletion
takes. The controllers act on it (``reads.being_deleted``): a ScheduledJob whose namespace
is going is treated as deleted at once, its finalizer released as soon as no run of it
runs — Kubernetes deletes a namespace's other objects only after its pods are gone, and
a finalizer still there then holds the namespace another 8 seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

# How long a namespace seen going is remembered: a deletion that takes longer (a stuck
# finalizer) is asked about again, once, and remembered anew. Bounds the memory of a
# cluster whose namespaces come and go all day.
REMEMBER_SECONDS = 3600.0


class NamespaceEndings:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._since: dict[str, tuple[datetime, float]] = {}  # -> deletion began, seen at
        self._watched: set[str] = set()  # kept until the watch says they are gone

    def known(self, namespace: str, created: datetime | None) -> bool:
        """Whether ``namespace`` is known to be going for an object of it created at
        ``created`` (None: unknown, so not known)."""
        with self._lock:
            found = self._since.get(namespace)
        return found is not None and created is not None and created < found[0]

    def saw(self, namespace: str, since: datetime) -> None:
        """``namespace`` is being deleted, since ``since`` (at the latest)."""
        with self._lock:
            self._remember(namespace, since)

    def watched(self, namespace: str, since: datetime) -> bool:
        """The Namespace watch saw ``namespace`` being deleted, since ``since``: kept until
        it calls :meth:`gone`. True the first time the watch says so."""
        with self._lock:
            self._remember(namespace, since)
            news = namespace not in self._watched
            self._watched.add(namespace)
        return news

    def _remember(self, namespace: str, since: datetime) -> None:
        now = self._monotonic()
        for name, (_, seen) in list(self._since.items()):
            if now - seen > REMEMBER_SECONDS and name not in self._watched:
                del self._since[name]
        self._since[namespace] = (since, now)

    def gone(self, namespace: str) -> None:
        """The watch saw ``namespace`` go: remembered from now on as any other sighting
        (an object of it still in a queue is answered without a request)."""
        now = self._monotonic()
        with self._lock:
            self._watched.discard(namespace)
            found = self._since.get(namespace)
            if found is not None:
                self._since[namespace] = (found[0], now)
