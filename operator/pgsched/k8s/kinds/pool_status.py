"""ConcurrencyPools as the cluster sees them: their gauges and their status.

Every few seconds (``PGSCHED_GAUGE_INTERVAL_SECONDS``, like the other gauges) each pool's
limit, RUNNING and QUEUED runs are read from the database into the ``pgsched_pool_*``
gauges, and a pool's ``status`` (running, queued, jobs) is merge-patched where it changed
since this replica last wrote it — so ``kubectl get concurrencypools`` stays current without
a status write per pool per round. A pool that jobs name but that has no resource gets
gauges only (there is nothing to write a status to).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pgsched import metrics
from pgsched.db.connection import Connection
from pgsched.engine import pools
from pgsched.k8s.client import api
from pgsched.k8s.names import Obj


@dataclass
class PoolStatusResult:
    pools: int = 0  # pools with gauges
    patched: int = 0  # pool statuses written


@dataclass
class PoolStatus:
    kube: api.KubeApi
    # The status this replica last wrote per (namespace, name): patched only on change.
    written: dict[tuple[str, str], Obj] = field(default_factory=dict)

    def run_once(self, conn: Connection) -> PoolStatusResult:
        result = PoolStatusResult()
        for gauge in (metrics.POOL_LIMIT, metrics.POOL_RUNNING, metrics.POOL_QUEUED):
            gauge.clear()
        for pool in pools.stats(conn):
            result.pools += 1
            metrics.POOL_RUNNING.labels(pool.namespace, pool.name).set(pool.running)
            metrics.POOL_QUEUED.labels(pool.namespace, pool.name).set(pool.queued)
            if pool.limit is None:
                continue  # named by jobs, but there is no resource to write to
            metrics.POOL_LIMIT.labels(pool.namespace, pool.name).set(pool.limit)
            new = {"running": pool.running, "queued": pool.queued, "jobs": pool.jobs}
            key = (pool.namespace, pool.name)
            if self.written.get(key) == new:
                continue
            try:
                self.kube.merge_patch(
                    api.pool_path(pool.namespace, pool.name, subresource="status"),
                    {"status": new},
                )
            except api.ApiError as error:
                if not error.not_found:
                    raise
                continue  # deleted since; its delete handler forgets it
            self.written[key] = new
            result.patched += 1
        return result
