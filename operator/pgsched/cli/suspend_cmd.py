"""``pgsched suspend <sj>`` / ``pgsched resume <sj>``.

The ScheduledJob stays the source of truth: both commands patch its ``spec.suspend``
through the Kubernetes API, as the user the kubeconfig names (RBAC and the audit log
apply), and the operator syncs the definition from it. With ``--database``
(administrators) they also write the definition at once, so the next tick obeys. If the
API server refuses the patch, nothing is changed anywhere.

``resume`` also clears an automatic suspension (``failureSuspendThreshold``), which lives
only in the database, so it patches no spec (a GitOps tool sees no drift): the
``pgsched.dev/resume=true`` request (``cli/requests.py``), or with ``--database`` the CLI
itself. ``suspend --reason`` writes the ``pgsched.dev/suspend-reason`` annotation in the
same patch (``k8s/scheduledjobs/suspension.py``).

In full: docs/cli.md, "suspend, resume".
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pgsched.cli import common, output, requests, target
from pgsched.cli.output import utc_iso
from pgsched.engine import definitions

if TYPE_CHECKING:
    from pgsched.db.connection import Connection
    from pgsched.engine.models import Definition
    from pgsched.k8s.client import api


def configure(parser: argparse.ArgumentParser) -> None:
    """``suspend`` and ``resume`` alike; which one was chosen is ``args.command``."""
    parser.description = (
        "Suspend or resume a ScheduledJob: patch its spec.suspend through the Kubernetes API"
        " (RBAC: patch scheduledjobs); with --database, also apply it to the definition at"
        " once. While it is suspended, due occurrences are recorded as SKIPPED/Suspended."
        " resume also clears an automatic suspension (failureSuspendThreshold) and its"
        " failure streak."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
    requests.add_flags(parser)
    output.add_flag(parser)
    if parser.prog.endswith("suspend"):
        parser.add_argument(
            "--reason",
            type=_reason,
            help="why it is suspended, shown in its status, pgsched next and the UI until it"
            " is resumed, e.g. --reason 'warehouse migration, back on Monday'",
        )
    parser.set_defaults(handler=run, reason=None)


def _reason(text: str) -> str:
    from pgsched.k8s.scheduledjobs import suspension

    if not text.strip() or len(text) > suspension.MAX_REASON or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"a reason is 1 to {suspension.MAX_REASON} printable characters, e.g. --reason"
            " 'warehouse migration'"
        )
    return text.strip()


def _annotations(args: argparse.Namespace, current: dict[str, Any]) -> dict[str, str | None]:
    """The suspend-reason annotation to write: the new reason on suspend (kept if none is
    given), removed on resume."""
    from pgsched.k8s import names

    key = names.ANNOTATION_SUSPEND_REASON
    present = key in ((current.get("metadata") or {}).get("annotations") or {})
    if args.command == "suspend":
        return {key: args.reason} if args.reason else {}
    return {key: None} if present else {}


def run(args: argparse.Namespace) -> int:
    if args.database:
        return _through_database(args)
    suspend = args.command == "suspend"
    from pgsched.k8s import names

    kube = target.kube(args)
    current = requests.scheduled_job(kube, target.namespace(args), args.name)
    meta = current["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    patched = bool((current.get("spec") or {}).get("suspend", False)) != suspend
    annotations = _annotations(args, current)
    if patched or annotations:
        current = requests.patch_spec(kube, current, {"suspend": suspend}, annotations=annotations)
    auto = _auto_suspension(current) if not suspend else None
    sent = None
    if auto is not None:
        sent = requests.send(kube, args, current, names.ANNOTATION_RESUME, "true")
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": key,
                "suspended": suspend,
                "specPatched": patched,
                "reason": args.reason,
                "autoSuspensionCleared": sent is not None and sent.taken,
                "autoSuspendReason": auto,
                "via": "kubernetes",
            }
        )
        return 0
    how = f"spec.suspend {'set to' if patched else 'was already'} {str(suspend).lower()}"
    why = f": {args.reason}" if args.reason else ""
    print(f"{key} {'suspended' if suspend else 'resumed'} ({how}){why}")
    if sent is not None:
        what = f"clearing the automatic suspension ({auto})"
        print(requests.describe(sent, what, timeout=args.timeout))
    return 0


def _auto_suspension(obj: dict[str, Any]) -> str | None:
    """Why the status says the operator suspended the job itself, if it does."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "Suspended" and condition.get("reason") == "TooManyFailures":
            return str(condition.get("message", "")).split(";")[0]
    return None


def _through_database(args: argparse.Namespace) -> int:
    from pgsched.k8s.client import api

    suspend = args.command == "suspend"
    requests.announce_bypass()
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        kube = target.kube(args)
        current = _resource(kube, definition)
        spec_suspend = bool((current.get("spec") or {}).get("suspend", False))
        patched = spec_suspend != suspend
        annotations = _annotations(args, current)
        try:
            if patched or annotations:
                current = kube.merge_patch(
                    target.resource_path(definition),
                    {"metadata": {"annotations": annotations}, "spec": {"suspend": suspend}},
                )
        except api.ApiError as error:
            raise common.CommandError(
                f"could not patch spec.suspend of {definition.key}: {error.message};"
                " nothing was changed"
            ) from None
        stored = definitions.set_suspended(conn, definition.id, suspend)
        if stored is None:
            raise common.CommandError(f"{definition.key} was deleted meanwhile")
        if annotations:
            definitions.set_suspend_reason(conn, definition.id, args.reason)
            stored = replace(stored, suspend_reason=args.reason)
        warning = _refresh_status(kube, conn, stored, current)
    cleared = not suspend and definition.auto_suspended_at is not None
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": definition.key,
                "suspended": stored.is_suspended,
                "specPatched": patched,
                "autoSuspensionCleared": cleared,
                "autoSuspendReason": definition.auto_suspend_reason if cleared else None,
                "nextRunAt": utc_iso(stored.next_run_at),
                "warning": warning,
            }
        )
        return 0
    if suspend:
        how = "spec.suspend set to true" if patched else "spec.suspend was already true"
        print(f"{definition.key} suspended ({how})")
    else:
        done = []
        if cleared:
            done.append(f"cleared the automatic suspension: {definition.auto_suspend_reason}")
        done.append("spec.suspend set to false" if patched else "spec.suspend is false")
        print(f"{definition.key} resumed ({'; '.join(done)})")
        if stored.next_run_at is not None:
            print(f"next run at {utc_iso(stored.next_run_at)}")
    if warning:
        print(f"warning: {warning}")
    return 0


def _resource(kube: api.KubeApi, definition: Definition) -> dict[str, Any]:
    from pgsched.k8s.client import api

    try:
        current = kube.get(target.resource_path(definition))
    except api.ApiError as error:
        if error.not_found:
            raise common.CommandError(
                f"ScheduledJob {definition.key} is not in Kubernetes (the database still"
                " has its definition: is it being deleted, or is this the wrong cluster?)"
            ) from None
        raise common.CommandError(f"cannot read ScheduledJob {definition.key}: {error}") from None
    uid = (current.get("metadata") or {}).get("uid")
    if uid != str(definition.id):
        raise common.CommandError(
            f"ScheduledJob {definition.key} in Kubernetes has uid {uid}, the database's"
            f" definition is {definition.id}: is the kubeconfig pointing at another cluster?"
        )
    return current


def _refresh_status(
    kube: api.KubeApi, conn: Connection, stored: Definition, current: dict[str, Any]
) -> str | None:
    """Re-render the status from the database (as any operator replica would)."""
    from pgsched.k8s.client import api
    from pgsched.k8s.reporting.publisher import Publisher

    try:
        Publisher(kube).patch_status(conn, stored, current)
    except api.ApiError as error:
        return (
            f"the ScheduledJob's status was not refreshed ({error.message}); the operator"
            " refreshes it at the next run"
        )
    return None
