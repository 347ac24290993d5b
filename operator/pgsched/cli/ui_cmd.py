"""``pgsched ui``: the read-only web UI on this machine, against a database.

Who may see what (see ``pgsched.ui.access``):

- default, ``--auth kubeconfig``: namespaces your kubeconfig identity may
  ``get scheduledjobs`` in (SelfSubjectAccessReview); Jobs, pods and logs through it too.
  Anyone who can reach the port acts as you, so it binds to 127.0.0.1.
- ``--auth token``: like the operator's UI — every visitor signs in with a Kubernetes
  bearer token, checked with TokenReview and SubjectAccessReview (your kubeconfig
  identity needs ``create`` on both).
- ``--no-auth``: every namespace in the database, no Kubernetes at all.
"""

from __future__ import annotations

import argparse

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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pgsched.ui import access, server

    _, colon, port = args.bind.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise common.CommandError(
            f"--bind {args.bind!r} is not host:port (example: --bind 127.0.0.1:8090)", code=2
        )
    if not args.dsn:
        raise common.CommandError("no database given: pass --dsn or set PGSCHED_DSN", code=2)
    ui_access: access.Access
    if args.no_auth:
        ui_access = access.OpenAccess()
    elif args.auth == "token":
        ui_access = access.TokenAccess(target.kube(args))
    else:
        ui_access = access.KubeconfigAccess(target.kube(args))
    pool = server.open_pool(args.dsn)
    try:
        print(f"pgsched ui: http://{args.bind}/ ({ui_access.mode} access); Ctrl-C stops it")
        server.serve(server.build_app(pool, ui_access), args.bind)
    finally:
        pool.close()
    return 0
