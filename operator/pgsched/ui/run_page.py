"""One run's page: everything ``pgsched describe`` shows (one renderer, run_facts), its
retry chain, and its Job, pods and log from Kubernetes. A run (whose URL names no namespace)
that does not exist and one in a namespace the visitor may not see get the same 404, byte
for byte. A run's Job and pods are shown only to who may ``get jobs`` and ``list pods`` in
its namespace, its log only to who may ``get pods/log``, and at most LOG_LINES lines and
LOG_BYTES bytes of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from pgsched import wording
from pgsched.engine import definitions, run_facts, runs
from pgsched.engine.models import Definition, Run
from pgsched.k8s import names
from pgsched.k8s.client import api
from pgsched.ui import access as acl
from pgsched.ui import html, pieces
from pgsched.ui.html import e, link

LOG_LINES = 200
LOG_BYTES = 64 * 1024  # the kubelet stops reading there (limitBytes): a huge line stays cheap


def page(ctx: pieces.Context, run_id: str, query: Mapping[str, str]) -> pieces.Page:
    pieces.only(query, ())
    if not run_id.isdigit() or not 1 <= int(run_id) < 2**63:
        raise pieces.PageError(
            400,
            f"{run_id[:40]!r} is not a run id: run ids are positive integers (example: /runs/4711)",
        )
    found = runs.get(ctx.conn, int(run_id))
    d = definitions.get(ctx.conn, found.definition_id) if found is not None else None
    if found is None or d is None or not ctx.access.allows(ctx.user, d.namespace):
        # One answer for "no such run" and "not yours": an id says nothing about others'.
        raise pieces.PageError(404, "no such run in a namespace you may see (check the run id)")
    zone = pieces.zone_of(d)
    facts = run_facts.of_run(ctx.conn, found, d, now=ctx.now, zone=zone)
    chain = facts.attempts

    def shown(label: str, value: run_facts.Value) -> str:
        if label == "Status":
            return f"<span class='cell {e(found.status)}'></span> {e(value)}"
        if label == "ScheduledJob":
            return link(pieces.job_url(d), value)
        if isinstance(value, tuple):
            return "".join(
                link(pieces.run_url(part.run_id), part.text)
                if isinstance(part, run_facts.RunLink)
                else e(part)
                for part in value
            )
        if isinstance(value, datetime):
            return e(html.local(value, zone))
        if isinstance(value, timedelta):
            return e(wording.duration(value))
        return e(value)

    body = [html.fields([(label, shown(label, value)) for label, value in facts.lines])]
    if len(chain) > 1:
        rows = [
            [
                e(item.attempt),
                link(pieces.run_url(item.id), item.id) + (" ◀" if item.id == found.id else ""),
                pieces.status_cell(item),
                e(html.local(item.scheduled_for, zone)),
                e(html.local(item.finished_at, zone)),
                e(item.k8s_job_name),
            ]
            for item in chain
        ]
        body.append(
            "<h2>Retry chain</h2>"
            + html.table(
                ["attempt", "run", "status", "scheduled", "finished", "job"], rows, id="chain"
            )
        )
    body.append(_kubernetes(ctx, d, found))
    return pieces.Page(f"run {found.id} of {d.key}", "".join(body))


def _kubernetes(ctx: pieces.Context, d: Definition, run: Run) -> str:
    kube = ctx.access.kube
    if kube is None:
        return "<h2>Kubernetes</h2><p>Not shown: this is a database-only view (--no-auth).</p>"
    if run.k8s_job_name is None:
        return "<h2>Kubernetes</h2><p>No Job was created for this run.</p>"
    parts = ["<h2>Kubernetes Job</h2>"]
    if not ctx.access.allows(ctx.user, d.namespace, acl.JOBS):
        return "".join(parts) + _hidden("Job", "get jobs", d.namespace)
    try:
        job_object = kube.get(
            api.path_of(group="batch", namespace=d.namespace, plural="jobs", name=run.k8s_job_name)
        )
    except api.ApiError as error:
        if error.not_found:
            return (
                "".join(parts)
                + f"<p>Job {e(run.k8s_job_name)} no longer exists (history limits or TTL removed it).</p>"
            )
        return "".join(parts) + f"<p class='error'>cannot read the Job: {e(error.message)}</p>"
    status = job_object.get("status") or {}
    conditions = ", ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}".strip()
        for c in status.get("conditions") or []
    )
    parts.append(
        html.fields(
            [
                ("Name", e(run.k8s_job_name)),
                (
                    "Active / succeeded / failed",
                    e(
                        f"{status.get('active', 0)} / {status.get('succeeded', 0)} / {status.get('failed', 0)}"
                    ),
                ),
                ("Conditions", e(conditions or None)),
            ]
        )
    )
    if not ctx.access.allows(ctx.user, d.namespace, acl.PODS):
        return "".join(parts) + "<h2>Pods</h2>" + _hidden("pods and log", "list pods", d.namespace)
    try:
        pods = (
            kube.get(
                api.path_of(namespace=d.namespace, plural="pods"),
                labelSelector=f"{names.LABEL_RUN_ID}={run.id}",
            ).get("items")
            or []
        )
    except api.ApiError as error:
        return (
            "".join(parts) + f"<p class='error'>cannot list the Job's pods: {e(error.message)}</p>"
        )
    parts.append("<h2>Pods</h2>")
    if not pods:
        parts.append("<p>No pod exists for this run any more.</p>")
    rows = []
    for pod in pods:
        states = []
        for item in (pod.get("status") or {}).get("containerStatuses") or []:
            state = item.get("state") or {}
            kind = next(iter(state), "unknown")
            detail = state.get(kind) or {}
            states.append(
                f"{item.get('name')}: {kind} {detail.get('reason') or ''} {detail.get('exitCode', '')}".strip()
            )
        rows.append(
            [
                e(pod["metadata"]["name"]),
                e((pod.get("status") or {}).get("phase")),
                e("; ".join(states) or None),
            ]
        )
    if rows:
        parts.append(html.table(["pod", "phase", "containers"], rows, id="pods"))
        parts.append(_log(ctx, kube, d, pods[0]))
    return "".join(parts)


def _hidden(what: str, verb: str, namespace: str) -> str:
    return f"<p class='hidden'>{e(what)} not shown: you may not {e(verb)} in {e(namespace)}.</p>"


def _log(ctx: pieces.Context, kube: api.KubeApi, d: Definition, pod: dict[str, object]) -> str:
    if not ctx.access.allows(ctx.user, d.namespace, acl.POD_LOGS):
        return _hidden("Log", "get pods/log", d.namespace)
    metadata = pod["metadata"]
    spec = pod.get("spec")
    assert isinstance(metadata, dict) and isinstance(spec, dict)
    containers = [
        item["name"] for item in spec.get("containers") or [] if item["name"] != names.SIDECAR_NAME
    ]
    if not containers:
        return ""
    path = api.path_of(
        namespace=d.namespace, plural="pods", name=str(metadata["name"]), subresource="log"
    )
    try:
        text = kube.get_text(
            path, container=containers[0], tailLines=LOG_LINES, limitBytes=LOG_BYTES
        )
    except api.ApiError as error:
        return f"<p class='error'>cannot read the log: {e(error.message)}</p>"
    cut = (
        f"<p id='log-cut'>Cut at {LOG_BYTES // 1024} KiB: <code>kubectl logs</code> has the rest.</p>"
        if len(text.encode()) >= LOG_BYTES
        else ""
    )
    return (
        f"<h2>Log of {e(containers[0])} (last {LOG_LINES} lines, at most {LOG_BYTES // 1024} KiB)</h2>"
        f"<pre id='log'>{e(text)}</pre>{cut}"
    )
