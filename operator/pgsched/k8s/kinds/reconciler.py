"""What the controllers of the settings kinds share: ConcurrencyPool, Calendar, NotificationPolicy.

Each of them turns an object into rows the database reads (a pool's limit, a calendar's
days, a namespace's default notifications) and re-renders the statuses of the jobs that
follow it. The frame around that is the same for all three and lives here once: an event
for an object being deleted forgets its rows and then releases pgsched's finalizer (so the
database never keeps what Kubernetes no longer shows, even when the deletion happened
while no operator ran); any other event applies the object; a database or API error is
logged and the key retried (``controller.retry_later``). A subclass names its kind and
the API path of its objects in its class line (``kind=``, ``path=``) and says what
applying and forgetting an object mean. It decides itself when to take the finalizer
(``hold``), always before it stores anything: a Calendar holds it even while its spec is
invalid, the other two only once their spec is valid.

Members are re-rendered after the change commits, never inside its transaction (the
``concurrencypools`` module says why); ``render_members`` is that step for the kinds that
remember in memory which keys still owe a re-render.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from pgsched.db import clock
from pgsched.k8s.client import api, controller, finalizers, reads
from pgsched.k8s.client.watch import Event
from pgsched.k8s.kinds import ready as ready_condition
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting.publisher import Publisher


class SettingsReconciler:
    """The controller of one settings kind; ``handle`` is its work queue's handler."""

    kind: ClassVar[str]  # as logs name it: "ConcurrencyPool"
    # The API path of an object of the kind (or of its status): api.pool_path, ...
    path: Callable[[str, str, str | None], str]

    def __init_subclass__(
        cls, *, kind: str, path: Callable[[str, str, str | None], str], **rest: Any
    ) -> None:
        super().__init_subclass__(**rest)
        cls.kind = kind
        cls.path = staticmethod(path)  # a function, not a method of the reconciler

    def __init__(
        self,
        pool: ConnectionPool[Any],
        kube: api.KubeApi,
        publisher: Publisher,
        *,
        clock: Callable[[], datetime | None],
    ) -> None:
        self._pool = pool
        self._kube = kube
        self._publisher = publisher
        self._clock = clock
        self._log = logging.getLogger(type(self).__module__)
        # Keys whose members' statuses are still to be rendered after a change.
        self._unrendered: set[Hashable] = set()

    def handle(self, _uid: str, event: Event) -> float | None:
        """None when done, else seconds until the next try (or re-read)."""
        meta = event.object["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            # Its namespace going counts as deleted (reads.being_deleted): the finalizer is
            # then released before Kubernetes comes to the object, after the pods.
            if event.type == "DELETED" or reads.being_deleted(self._kube, meta):
                self.forget(namespace, name)
                if event.type != "DELETED":
                    finalizers.remove(
                        self._kube,
                        self.path(namespace, name, None),
                        finalizers=meta.get("finalizers") or (),
                        version=str(meta.get("resourceVersion") or ""),
                    )
                return None
            return self.apply(event.object)
        except (psycopg.Error, api.ApiError) as error:
            return controller.retry_later(f"{self.kind} {namespace}/{name}", error, self._log)

    def apply(self, body: Obj) -> float | None:
        """Store what the object says; seconds until it is to be read again, or None."""
        raise NotImplementedError

    def forget(self, namespace: str, name: str) -> None:
        """Remove what the object stored (it is being deleted)."""
        raise NotImplementedError

    def hold(self, meta: Obj) -> bool:
        """Put pgsched's finalizer on the object; False if it is gone or being deleted (the
        deletion's event does the rest)."""
        added = finalizers.add(
            self._kube,
            self.path(meta["namespace"], meta["name"], None),
            finalizers=meta.get("finalizers") or (),
            version=str(meta.get("resourceVersion") or ""),
        )
        return added is not None

    def render_members(self, conn: Any, key: Hashable, members: Callable[[], list[UUID]]) -> None:
        """Re-render the statuses of ``members()`` if a change of ``key`` left them owed."""
        if key not in self._unrendered:
            return
        self._publisher.refresh_statuses(conn, members())
        self._unrendered.discard(key)

    def write_ready(self, body: Obj, *, ready: bool, reason: str, message: str) -> None:
        """The object's ``Ready`` condition (``kinds.ready``)."""
        meta = body["metadata"]
        ready_condition.write(
            self._kube,
            self.path(meta["namespace"], meta["name"], "status"),
            body,
            ready=ready,
            reason=reason,
            message=message,
            now=self._clock() or clock.local(),
        )
