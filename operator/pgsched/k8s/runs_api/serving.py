"""Starting the Run API in the operator: its front-proxy check, pool, reviews and server."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pgsched.db import connection
from pgsched.engine import loop
from pgsched.k8s.access import SubjectReviews
from pgsched.k8s.client import api
from pgsched.k8s.runs_api import changes
from pgsched.k8s.runs_api.actions import Actions
from pgsched.k8s.runs_api.frontproxy import FrontProxy
from pgsched.k8s.runs_api.server import RunsApi, RunsApiServer
from pgsched.k8s.runs_api.store import RunReader
from pgsched.runapi.threaded import tls_context

# The files of PGSCHED_RUNS_API_CERT_DIR, a Kubernetes TLS Secret's.
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"


class RunsApiServing:
    """The Run API of this replica: serving until :meth:`stop`."""

    def __init__(
        self,
        *,
        dsn: str,
        kube: api.KubeApi,
        bind: str,
        cert_dir: Path,
        pool_size: int,
        access_ttl: float,
    ) -> None:
        host, _, port = bind.rpartition(":")
        front_proxy = FrontProxy.load(kube)
        tls = tls_context(str(cert_dir / CERT_FILE), str(cert_dir / KEY_FILE))
        front_proxy.require_client_certificates(tls)
        self._pool = connection.pool(dsn, name="pgsched-runs-api", max_size=pool_size)
        # Beside the reads, access reviews wait on the API server: threads for both.
        self._executor = ThreadPoolExecutor(pool_size * 2, thread_name_prefix="pgsched-runs-api")
        reader = RunReader(self._pool)
        runs_api = RunsApi(
            reader,
            Actions(self._pool, reader),
            front_proxy,
            SubjectReviews(kube, ttl=access_ttl),
            self._executor,
        )
        self._server = RunsApiServer(host.strip("[]") or "0.0.0.0", int(port), tls, runs_api)
        self._stop = threading.Event()
        self._changes = threading.Thread(
            target=self._order_changes, name="pgsched-runs-api-changes", daemon=True
        )

    def start(self) -> None:
        self._server.start()
        self._changes.start()

    def alive(self) -> bool:
        return self._server.alive() and self._changes.is_alive()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._changes.join(timeout)
        self._server.stop(timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.close()

    def _order_changes(self) -> None:
        """The service that gives run changes their watch order (pruning them is the
        operator's, Run API or not: the trigger keeps them either way)."""
        loop.run(
            [
                loop.Service(
                    "ordering run changes for watches",
                    self._sequence,
                    changes.SEQUENCE_SECONDS,
                    again=lambda result: result.more,
                ),
            ],
            self._stop,
        )

    def _sequence(self) -> changes.Sequenced:
        with self._pool.connection() as conn:
            return changes.sequence(conn)
