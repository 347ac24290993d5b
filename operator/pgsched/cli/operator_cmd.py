"""``pgsched operator``: run the Kubernetes operator (settings from the environment)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from pgsched.cli import common

if TYPE_CHECKING:
    from pgsched.k8s.serve.settings import OperatorSettings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the pgsched operator. Configuration comes from PGSCHED_* environment "
        "variables (see docs/configuration.md); flags override them."
    )
    common.add_dsn(parser)
    parser.add_argument(
        "--namespace", action="append", default=[], help="namespace to watch (repeatable)"
    )
    parser.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--image", help="pgsched image for the heartbeat sidecar (env PGSCHED_IMAGE)"
    )
    parser.add_argument(
        "--migrate", action="store_true", help="apply schema migrations before starting"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pgsched.db import migrate
    from pgsched.k8s.serve import operator
    from pgsched.k8s.serve.settings import OperatorSettings
    from pgsched.validation import SettingsError

    environ = dict(os.environ)
    if args.dsn:
        environ["PGSCHED_DSN"] = args.dsn
    if args.namespace:
        environ["PGSCHED_NAMESPACES"] = ",".join(args.namespace)
    if args.all_namespaces:
        environ["PGSCHED_ALL_NAMESPACES"] = "true"
    if args.image:
        environ["PGSCHED_IMAGE"] = args.image
    try:
        settings = OperatorSettings.from_environment(environ)
    except SettingsError as error:
        raise common.CommandError(str(error), code=2) from None
    if args.migrate:
        with common.connect(args, application_name="pgsched-migrate") as conn:
            migrate.migrate(conn)
    ui = _start_ui(settings)
    try:
        operator.run(settings)
    except operator.StartupError as error:
        raise common.CommandError(f"cannot start: {error}") from None
    finally:
        if ui is not None:
            ui.stop()
    return 0


def _start_ui(settings: OperatorSettings) -> Any:
    """The web UI on its own port and thread, token-authenticated (PGSCHED_UI_*)."""
    if not settings.ui_bind:
        return None
    from pgsched.k8s.client import api
    from pgsched.ui import access, server

    tls = None
    if settings.ui_tls_cert_file:
        try:
            tls = server.tls_context(settings.ui_tls_cert_file, settings.ui_tls_key_file)
        except ValueError as error:
            raise common.CommandError(f"PGSCHED_UI_TLS_CERT_FILE: {error}", code=2) from None
    kube = api.KubeApi.from_environment(qps=10, burst=20)
    pool = server.open_pool(settings.dsn)
    ui_access = access.TokenAccess(kube, audience=settings.ui_audience)
    app = server.build_app(pool, ui_access, cookie_secure=settings.ui_cookie_secure)
    app.on_cleanup.append(lambda _: _close(pool))
    return server.serve_in_thread(app, settings.ui_bind, tls=tls)


async def _close(pool: Any) -> None:
    pool.close()
