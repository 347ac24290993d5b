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
from typing import Any

from pgsched import spec as spec_module
from pgsched.engine import pools
from pgsched.k8s.client import api
from pgsched.k8s.kinds.reconciler import SettingsReconciler
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


class Pools(SettingsReconciler, kind="ConcurrencyPool", path=api.pool_path):
    def apply(self, body: Obj) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            limit = spec_module.pool_limit(body.get("spec") or {})
        except spec_module.SpecError as error:
            # The CRD's schema and the admission webhook refuse this at apply; a pool
            # applied without them is ignored (its jobs wait), never retried in a loop.
            log.warning("ConcurrencyPool %s/%s: %s; ignored", namespace, name, error)
            return
        if not self.hold(meta):
            return
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

    def forget(self, namespace: str, name: str) -> None:
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

    def _refresh_members(self, conn: Any, namespace: str, name: str) -> None:
        """Re-render the status (PoolReady) of every live job that names the pool, if the
        pool's last change asked for it and no refresh has done it since."""
        requested = pools.member_refresh_requested(conn, namespace, name)
        if requested is None:
            return
        self._publisher.refresh_statuses(conn, pools.members(conn, namespace, name))
        pools.forget_member_refresh(conn, namespace, name, requested)
