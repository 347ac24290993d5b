"""Naming a ScheduledJob on the command line, and reaching Kubernetes when a command must.

``<sj>`` is a ScheduledJob name, with ``-n/--namespace`` (default: the namespace of the
kubeconfig's current context, else ``default``), as with kubectl. It is resolved in the
database, not in Kubernetes: the database holds the definition and every run, so history,
``next`` and ``run-now`` work even while the API server is unreachable. Only commands that
change the resource (``suspend``, ``resume``) or check it (``doctor``) talk to Kubernetes,
through the same rate-limited client as the operator (``pgsched.k8s.client.api``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pgsched.cli import output
from pgsched.cli.common import CommandError
from pgsched.engine import definitions

if TYPE_CHECKING:
    from pgsched.db.connection import Connection
    from pgsched.engine.models import Definition
    from pgsched.k8s.client import api

# The Kubernetes client library takes about half a second to import: only the commands
# that talk to Kubernetes pay for it (imports inside the functions below).


def add_kube_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")


def add_flags(parser: argparse.ArgumentParser, *, short_namespace: bool = True) -> None:
    """``name``, ``-n/--namespace``, ``--kubeconfig`` and ``--context``."""
    parser.add_argument("name", metavar="SJ", help="ScheduledJob name")
    add_namespace(parser, short=short_namespace)
    add_kube_flags(parser)


def add_namespace(parser: argparse.ArgumentParser, *, short: bool = True) -> None:
    flags = ["-n", "--namespace"] if short else ["--namespace"]
    parser.add_argument(
        *flags,
        dest="namespace",
        help="namespace of the ScheduledJob (default: the kubeconfig context's, else default)",
    )


def namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    return default_namespace(args.kubeconfig, args.context)


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context, like kubectl; ``default`` without one.

    Read with PyYAML rather than the Kubernetes client, which takes a third of a second to
    import, so ``pgsched runs SJ`` without ``-n`` starts as fast as with it. The files merge
    as kubectl merges them: ``$KUBECONFIG``'s in order, the first to set ``current-context``
    or to define a context of a given name wins.
    """
    import yaml

    files = [kubeconfig] if kubeconfig else _kubeconfig_files()
    current: str | None = None
    contexts: dict[str, dict[str, object]] = {}
    for file in files:
        try:
            loaded = yaml.safe_load(Path(file).expanduser().read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(loaded, dict):
            continue
        current = current or loaded.get("current-context")
        for item in loaded.get("contexts") or []:
            if isinstance(item, dict) and isinstance(item.get("context"), dict):
                contexts.setdefault(str(item.get("name")), item["context"])
    chosen = contexts.get(context or "") or contexts.get(current or "") or {}
    return str(chosen.get("namespace") or "default")


def _kubeconfig_files() -> list[str]:
    listed = os.environ.get("KUBECONFIG", "")
    return [file for file in listed.split(os.pathsep) if file] or ["~/.kube/config"]


def definition(conn: Connection, args: argparse.Namespace) -> Definition:
    """The live definition named on the command line, or a CommandError saying why not."""
    ns = namespace(args)
    found = definitions.find(conn, ns, args.name)
    if found is None:
        deleted = definitions.find_with_deleted(conn, ns, args.name)
        if deleted:
            raise CommandError(
                f"ScheduledJob {ns}/{args.name} was deleted"
                f" at {output.utc_iso(deleted[0].deleted_at)}; its runs are kept:"
                f" `pgsched runs {args.name} -n {ns} --include-deleted` lists them"
            )
        raise CommandError(
            f"no ScheduledJob {ns}/{args.name} in the pgsched database: check the name and"
            f" namespace (`kubectl get sj -n {ns}`), and that an operator watches {ns}"
        )
    return found


def has_kubeconfig(kubeconfig: str | None) -> bool:
    """Whether credentials for Kubernetes are at hand (flag, $KUBECONFIG, ~/.kube, a pod)."""
    if kubeconfig or os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return (Path.home() / ".kube" / "config").exists()


def kube(args: argparse.Namespace, *, attempts: int = 3) -> api.KubeApi:
    """A Kubernetes client from the kubeconfig flags; CommandError without credentials."""
    from kubernetes import config as kube_config

    from pgsched.k8s.client import api
    from pgsched.k8s.client.ratelimit import TokenBucket

    try:
        configuration = api.load_configuration(args.kubeconfig, args.context)
    except (kube_config.ConfigException, OSError) as error:
        raise CommandError(
            f"cannot load Kubernetes credentials: {error} (pass --kubeconfig or set KUBECONFIG)"
        ) from None
    return api.KubeApi(
        configuration,
        limiter=TokenBucket(10.0, 20),
        retry=api.RetrySettings(attempts=attempts, base_delay=0.2, max_delay=1.0),
        timeout=15.0,
    )


def resource_path(definition: Definition, *, subresource: str | None = None) -> str:
    from pgsched.k8s import names
    from pgsched.k8s.client import api

    return api.path_of(
        group=names.GROUP,
        version=names.VERSION,
        namespace=definition.namespace,
        plural=names.PLURAL,
        name=definition.name,
        subresource=subresource,
    )
