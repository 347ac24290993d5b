"""``pgsched ui``: the read-only web UI on this machine, against a database.

Who may see what (see ``pgsched.ui.access``):

- default, ``--auth kubeconfig``: namespaces your kubeconfig identity may
  ``get scheduledjobs`` in (SelfSubjectAccessReview); Jobs, pods and logs through it too.
  Anyone who can reach the port acts as you, so it binds to 127.0.0.1.
- ``--auth token``: like the operator's UI — every visitor signs in with a Kubernetes
  bearer token issued for ``--audience`` (default ``pgsched-ui``), checked with
  TokenReview and SubjectAccessReview (your kubeconfig identity needs ``create`` on both).
- ``--no-auth``: every namespace in the database, no Kubernetes at all.

``--tls-cert``/``--tls-key`` serve HTTPS instead of HTTP (docs/ui.md).
"""

from __future__ import annotations

import argparse

from pgsched import names
from pgsched.cli import common, target

DEFAULT_BIND = "127.0.0.1:8090"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve the read-only web UI: ScheduledJobs, timelines, runs and pod"
        " logs. By default you see what your kubeconfig identity may get scheduledjobs in;"
        " --no-auth shows every namespace of the database and nothing from Kubernetes."
    )
    common.add_dsn(parser)
    target.add_kube_flags(parser)
    parser.add_argument(
        "--bind", default=DEFAULT_BIND, help=f"host:port to listen on (default {DEFAULT_BIND})"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--auth",
        choices=["kubeconfig", "token"],
        default="kubeconfig",
        help="kubeconfig: act as your kubeconfig identity (default); token: every visitor"
        " signs in with a Kubernetes bearer token",
    )
    mode.add_argument(
        "--no-auth",
        action="store_true",
        help="database-only view of every namespace, no Kubernetes (for your own database)",
    )
    parser.add_argument(
        "--audience",
        default=names.UI_AUDIENCE,
        help="--auth token: the audience visitors' tokens must be issued for"
        " (kubectl create token NAME --audience pgsched-ui; default pgsched-ui)",
    )
    parser.add_argument(
        "--api-server-tokens",
        action="store_true",
        help="--auth token: accept tokens for the API server's own audience instead of"
        " --audience (the UI then receives credentials valid against the API server)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain: serve HTTPS (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument(
        "--cookie-secure",
        choices=names.UI_COOKIE_SECURE,
        default="auto",
        help="when the session cookie is Secure: auto (over TLS, or a proxy's"
        " X-Forwarded-Proto: https; sign-in over plain HTTP only on a loopback address),"
        " always, never (default auto)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pgsched.ui import access, server

    _, colon, port = args.bind.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise common.CommandError(
            f"--bind {args.bind!r} is not host:port (example: --bind 127.0.0.1:8090)", code=2
        )
    found = common.database(args)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise common.CommandError(
            "--tls-cert and --tls-key go together (example: --tls-cert tls.crt --tls-key tls.key)",
            code=2,
        )
    try:
        tls = server.tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    except ValueError as error:
        raise common.CommandError(str(error), code=2) from None
    ui_access: access.Access
    if args.no_auth:
        ui_access = access.OpenAccess()
    elif args.auth == "token":
        audience = None if args.api_server_tokens else args.audience
        ui_access = access.TokenAccess(target.kube(args), audience=audience)
    else:
        ui_access = access.KubeconfigAccess(target.kube(args))
    pool = server.open_pool(found)
    scheme = "https" if tls else "http"
    try:
        print(f"pgsched ui: {scheme}://{args.bind}/ ({ui_access.mode} access); Ctrl-C stops it")
        app = server.build_app(pool, ui_access, cookie_secure=args.cookie_secure)
        server.serve(app, args.bind, tls=tls)
    finally:
        pool.close()
    return 0
