"""ConcurrencyPools: their limits go to the database, where the claim counts against them.

A pool applied or changed → its limit upserted into ``job_pools`` and the PoolReady
condition of the jobs that name it refreshed; a pool deleted → removed (its jobs' runs
wait) and pgsched's finalizer released, so the database never keeps a limit Kubernetes no
longer shows. A pool's own status changes (written by ``pool_status``) change nothing
here: a pool whose stored limit is its spec's is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgsched.engine import definitions, pools
from pgsched.k8s import api, controller, finalizers
from pgsched.k8s.names import Obj
from pgsched.k8s.publisher import Publisher
from pgsched.k8s.watch import Event

log = logging.getLogger(__name__)


def select(event: Event) -> tuple[str, Event]:
    return str(event.object["metadata"]["uid"]), event


class Pools:
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

    def handle(self, _uid: str, event: Event) -> float | None:
        """None when done, else seconds until a retry."""
        meta = event.object["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            if event.type == "DELETED" or meta.get("deletionTimestamp"):
                self._delete(event)
            else:
                self._apply(event.object)
        except (psycopg.Error, api.ApiError) as error:
            return controller.retry_later(f"ConcurrencyPool {where}", error, log)
        return None

    def _apply(self, body: Obj) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        limit = (body.get("spec") or {}).get("limit")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            # The CRD's schema refuses this at admission; a pool applied without it is
            # ignored (its jobs wait), never retried in a loop.
            log.warning(
                "ConcurrencyPool %s/%s: spec.limit must be an integer of at least 1, got %r"
                " (example: limit: 2); ignored",
                namespace,
                name,
                limit,
            )
            return
        path = api.pool_path(namespace, name)
        if not finalizers.add(
            self._kube,
            path,
            finalizers=meta.get("finalizers") or (),
            version=str(meta.get("resourceVersion") or ""),
        ):
            return  # gone, or being deleted: the deletion's event does the rest
        # One transaction: if a member's status cannot be written, the limit is not stored
        # either, and the retry does both (a stored limit is what says "done").
        with self._pool.connection() as conn, conn.transaction():
            if pools.limit_of(conn, namespace, name) == limit:
                return
            pools.upsert(conn, namespace, name, limit, now=self._clock())
            self._refresh_members(conn, namespace, name)
        log.info("ConcurrencyPool %s/%s: limit %d", namespace, name, limit)

    def _delete(self, event: Event) -> None:
        meta = event.object["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        with self._pool.connection() as conn, conn.transaction():
            if pools.limit_of(conn, namespace, name) is not None:
                pools.delete(conn, namespace, name)
                self._refresh_members(conn, namespace, name)
                log.info(
                    "ConcurrencyPool %s/%s deleted: the jobs that name it wait", namespace, name
                )
        if event.type != "DELETED":
            finalizers.remove(
                self._kube,
                api.pool_path(namespace, name),
                finalizers=meta.get("finalizers") or (),
                version=str(meta.get("resourceVersion") or ""),
            )

    def _refresh_members(self, conn: Any, namespace: str, name: str) -> None:
        """Re-render the status (PoolReady) of every live job that names the pool."""
        for definition_id in pools.members(conn, namespace, name):
            definition = definitions.get(conn, definition_id)
            if definition is None:
                continue
            try:
                current = self._kube.get(api.scheduled_job_path(namespace, definition.name))
            except api.ApiError as error:
                if error.not_found:
                    continue
                raise
            if current.get("metadata", {}).get("uid") == str(definition.id):
                self._publisher.patch_status(conn, definition, current)
