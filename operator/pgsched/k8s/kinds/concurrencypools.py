"""ConcurrencyPools: their limits go to the database, where the claim counts against them.

A pool applied or changed → its limit upserted into ``job_pools`` and the PoolReady
condition of the jobs that name it refreshed; a pool deleted → removed (its jobs' runs
wait), its jobs refreshed, and pgsched's finalizer released, so the database never keeps a
limit Kubernetes no longer shows. A pool's own status changes (written by ``pool_status``)
change nothing here: a pool whose stored limit is its spec's is left alone.

The members are rendered after the change commits, never inside its transaction: a status
rendered from an uncommitted change reaches the API server before other writers can see
the change, and one of them, rendering from the old pool, could then write last. So the
transaction that changes the pool also records a request to refresh its members
(``pool_member_refreshes``, migration 0020), and the request is forgotten only once every
member's status is written: a refresh that fails is done by the retry, one cut short by a
crash by the restarted operator (which lists the pool again; a pool being deleted keeps
the finalizer until then). Every status write names the resourceVersion it was rendered
against (``Publisher.patch_status``), so the last one written is rendered from the pool as
it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgsched import spec as spec_module
from pgsched.engine import pools
from pgsched.k8s.client import api, controller, finalizers
from pgsched.k8s.client.watch import Event
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting.publisher import Publisher

log = logging.getLogger(__name__)


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
        try:
            limit = spec_module.pool_limit(body.get("spec") or {})
        except spec_module.SpecError as error:
            # The CRD's schema and the admission webhook refuse this at apply; a pool
            # applied without them is ignored (its jobs wait), never retried in a loop.
            log.warning("ConcurrencyPool %s/%s: %s; ignored", namespace, name, error)
            return
        path = api.pool_path(namespace, name)
        if (
            finalizers.add(
                self._kube,
                path,
                finalizers=meta.get("finalizers") or (),
                version=str(meta.get("resourceVersion") or ""),
            )
            is None
        ):
            return  # gone, or being deleted: the deletion's event does the rest
        with self._pool.connection() as conn:
            with conn.transaction():
                stored = pools.limit_of(conn, namespace, name)
                if stored != limit:
                    pools.upsert(conn, namespace, name, limit, now=self._clock())
                    if stored is None:  # PoolReady turns True
                        pools.request_member_refresh(conn, namespace, name)
            if stored != limit:
                log.info("ConcurrencyPool %s/%s: limit %d", namespace, name, limit)
            self._refresh_members(conn, namespace, name)

    def _delete(self, event: Event) -> None:
        meta = event.object["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        with self._pool.connection() as conn:
            with conn.transaction():
                stored = pools.limit_of(conn, namespace, name)
                if stored is not None:
                    pools.delete(conn, namespace, name)
                    pools.request_member_refresh(conn, namespace, name)
            if stored is not None:
                log.info(
                    "ConcurrencyPool %s/%s deleted: the jobs that name it wait", namespace, name
                )
            self._refresh_members(conn, namespace, name)
        if event.type != "DELETED":
            finalizers.remove(
                self._kube,
                api.pool_path(namespace, name),
                finalizers=meta.get("finalizers") or (),
                version=str(meta.get("resourceVersion") or ""),
            )

    def _refresh_members(self, conn: Any, namespace: str, name: str) -> None:
        """Re-render the status (PoolReady) of every live job that names the pool, if the
        pool's last change asked for it and no refresh has done it since."""
        requested = pools.member_refresh_requested(conn, namespace, name)
        if requested is None:
            return
        self._publisher.refresh_statuses(conn, pools.members(conn, namespace, name))
        pools.forget_member_refresh(conn, namespace, name, requested)
