"""The operator's servers beside its controllers: the admission webhook, the run API job
pods talk to, and the Run API kubectl reads runs through. Each is built from its settings
here, and what keeps one from starting (a certificate, a cluster without the front proxy)
stops the operator's start with a message that names the setting."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pgsched.k8s.client import api
from pgsched.k8s.runs_api.frontproxy import FrontProxyError
from pgsched.k8s.runs_api.serving import RunsApiServing
from pgsched.k8s.serve.settings import OperatorSettings
from pgsched.runapi.limits import Limits
from pgsched.runapi.serving import Serving

if TYPE_CHECKING:
    from pgsched.k8s.serve import webhook as webhook_module


class StartupError(RuntimeError):
    """A setting or the cluster keeps the operator from starting; the message says which."""


def webhook(settings: OperatorSettings) -> webhook_module.Webhook | None:
    """The admission webhook, if configured; a missing certificate stops the start. kopf is
    imported only then: an operator without the webhook does not carry it in memory."""
    if not settings.webhook.bind:
        return None
    from pgsched.k8s.serve import webhook as webhook_module

    try:
        return webhook_module.Webhook(settings.webhook)
    except webhook_module.WebhookError as error:
        raise StartupError(str(error)) from None


def run_api(settings: OperatorSettings, clock: Callable[[], datetime | None]) -> Serving:
    """The run API job pods talk to (docs/run-api.md); a certificate that cannot be
    loaded stops the start, naming the folder."""
    found = settings.run_api
    try:
        return Serving(
            dsn=settings.dsn,
            bind=found.bind,
            cert_dir=Path(found.cert_dir),
            limits=Limits(
                rate=found.namespace_rate,
                burst=found.namespace_burst,
                concurrency=found.namespace_concurrency,
                waiters=found.namespace_waiters,
            ),
            pool_size=found.pool_size,
            clock=clock,
        )
    except (OSError, ssl.SSLError) as error:
        raise StartupError(
            f"PGSCHED_RUN_API_CERT_DIR={found.cert_dir}: cannot load the run API's"
            f" certificate (tls.crt and tls.key, a mounted TLS Secret): {error}"
        ) from None


def runs_api(settings: OperatorSettings, kube: api.KubeApi) -> RunsApiServing | None:
    """The Run API (docs/runs-api.md), if configured; a certificate that cannot be loaded or
    a cluster without the aggregation layer's front proxy stops the start, saying which."""
    found = settings.runs_api
    if not found.bind:
        return None
    try:
        return RunsApiServing(
            dsn=settings.dsn,
            kube=kube,
            bind=found.bind,
            cert_dir=Path(found.cert_dir),
            pool_size=found.pool_size,
            access_ttl=found.access_ttl_seconds,
        )
    except FrontProxyError as error:
        raise StartupError(f"PGSCHED_RUNS_API_BIND={found.bind}: {error}") from None
    except (OSError, ssl.SSLError) as error:
        raise StartupError(
            f"PGSCHED_RUNS_API_CERT_DIR={found.cert_dir}: cannot load the Run API's"
            f" certificate (tls.crt and tls.key, a mounted TLS Secret): {error}"
        ) from None


def listen(
    servers: list[tuple[str, str, Serving | RunsApiServing | None]], *, stop_seconds: float
) -> None:
    """Start each server; one that cannot listen stops those started and the start, naming
    its setting (their threads are not daemons: a traceback here would leave them running)."""
    started: list[Serving | RunsApiServing] = []
    for setting, bind, server in servers:
        if server is None:
            continue
        try:
            server.start()
        except OSError as error:
            for running in started:
                running.stop(stop_seconds)
            raise StartupError(f"{setting}={bind}: {error}") from None
        started.append(server)
