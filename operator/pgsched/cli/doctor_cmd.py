"""``pgsched doctor``: is this installation healthy, and if not, what to do about it.

Each check prints ``ok``, ``warn`` or ``FAIL`` with a detail a person can act on; the exit
code is 1 when any check failed. The database checks run ``db.preflight`` — the same
checks that stop the operator from starting — then look at what the operator is doing:
the leader (replicas are the sessions named ``pgsched-tick``; the lock is held only while a
tick runs, so each replica's last statement tells whether it led the latest tick), stuck
runs, the publisher's backlog, suspensions, dead notifications, the clock and the
replication. With credentials it asks Kubernetes too: the CRD, ScheduledJobs that are not
Ready, and ScheduledJobs no operator serves, which the operator cannot report itself (it
may not read namespaces it does not watch).

Every check: docs/cli.md, "doctor".
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from pgsched.cli import common, output, target
from pgsched.db import boundary, clock, connection, preflight, queries, replication
from pgsched.engine import leader, notifications, starts

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

Status = Literal["ok", "warn", "FAIL", "skip"]
EXAMPLES = 5
STALE_LEADER = timedelta(seconds=60)
SLACK_SECONDS = 30
CLOCK_SKEW = timedelta(seconds=5)
OUTBOX_LAG = timedelta(seconds=60)


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check database connectivity, server and schema version, that"
        " connections are real sessions (no transaction pooler), which operator replica"
        " leads ticks, stuck runs, and, with a kubeconfig, the API server and the CRD."
        " Exit code 1 when any check fails."
    )
    common.add_dsn(parser)
    target.add_kube_flags(parser)
    output.add_flag(parser)
    parser.add_argument(
        "--leader-lock",
        default=os.environ.get("PGSCHED_LEADER_LOCK", leader.DEFAULT_LOCK_NAME),
        help="the operator's PGSCHED_LEADER_LOCK (default pgsched:tick-leader)",
    )
    parser.add_argument(
        "--queued-threshold",
        type=common.positive_int,
        default=300,
        help="seconds past due after which a QUEUED run counts as stuck (default 300)",
    )
    parser.add_argument(
        "--unserved-after",
        type=common.positive_int,
        default=60,
        help="seconds after its creation a ScheduledJob without any status counts as served"
        " by no operator (default 60)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    findings = _database(args, ready=not target.has_kubeconfig(args.kubeconfig))
    findings += _kubernetes(args)
    if args.output == "json":
        output.emit_json(
            {
                "ok": all(item.status != "FAIL" for item in findings),
                "checks": [
                    {"check": item.check, "status": item.status, "detail": item.detail}
                    for item in findings
                ],
            }
        )
    else:
        output.table(
            ["check", "status", "detail"],
            [[item.check, item.status, item.detail] for item in findings],
        )
    return 1 if any(item.status == "FAIL" for item in findings) else 0


def _database(args: argparse.Namespace, *, ready: bool) -> list[Finding]:
    """The database checks; ``ready``: also list rejected specs (when the API cannot)."""
    found = common.database(args)

    def connect() -> Connection:
        return connection.connect(found, application_name="pgsched-doctor")

    try:
        conn = connect()
    except psycopg.OperationalError as error:
        return [Finding("database", "FAIL", f"cannot connect: {str(error).strip()}")]
    findings = [Finding("database", "ok", f"connected to {_where(conn)}")]
    with conn:
        try:
            checks = preflight.run(conn, connect=connect)
        except preflight.PreflightError as error:
            return [*findings, Finding("session", "FAIL", str(error))]
        findings += [
            Finding(check.name, "ok" if check.ok else "FAIL", check.detail) for check in checks
        ]
        if not all(check.ok for check in checks if check.name == "schema"):
            return findings  # the pgsched tables are not what this code expects
        findings.append(_clock(conn))
        findings.append(_replication(conn))
        findings.append(_leader(conn, args.leader_lock))
        findings.append(_tenant_boundary(conn))
        findings += _stuck(conn, args.queued_threshold)
        findings.append(_outbox(conn))
        findings.append(_auto_suspended(conn))
        findings.append(_dead_letters(conn))
        if ready:
            findings.append(_not_ready_in_database(conn))
    return findings


def _not_ready_in_database(conn: Connection) -> Finding:
    """Ready=False as the status renders it, read from the database (no API access)."""
    rows = conn.execute(
        queries.get("not_ready_definitions"), {"cannot_start": starts.REASONS_CANNOT_START}
    ).fetchall()
    items = []
    for row in rows:
        refusal = starts.refusal_in(row)
        if row["rejection"] is None and refusal is not None:
            message = starts.refused_message(refusal, row["generation"])
        else:
            message = str(row["rejection"])
        items.append((f"{row['namespace']}/{row['name']}", message))
    return _not_ready(items)


def _not_ready(items: list[tuple[str, str]]) -> Finding:
    if not items:
        return Finding("not ready", "ok", "every ScheduledJob is Ready")
    listed = "; ".join(f"{name}: {message}" for name, message in items[:EXAMPLES])
    return Finding(
        "not ready",
        "warn",
        f"{len(items)} ScheduledJob(s) Ready=False ({listed}); fix the spec (kubectl describe"
        " sj shows the condition and the Event)",
    )


def _where(conn: Connection) -> str:
    info = conn.info
    return f"{info.dbname} on {info.host}:{info.port} as {info.user}"


def _clock(conn: Connection) -> Finding:
    skew = clock.local() - clock.now(conn)
    text = f"{abs(skew.total_seconds()):.1f}s"
    if abs(skew) > CLOCK_SKEW:
        return Finding(
            "clock",
            "warn",
            f"this machine's clock is {text} {'ahead of' if skew > timedelta(0) else 'behind'}"
            " the database's; pgsched schedules by the database clock (only times computed"
            " here, such as `pgsched next`, are affected)",
        )
    return Finding("clock", "ok", f"within {text} of the database clock")


def _replication(conn: Connection) -> Finding:
    found = replication.inspect(conn)
    # Whoever the doctor connects as is asked: run as the operator's role, it tells whether
    # the operator can keep a request annotation until every standby has its commit.
    blind = replication.blind_to_standbys(conn)
    if blind is not None:
        return Finding("replication", "warn", f"{found.detail}; {blind}")
    lossless = found.mode in ("synchronous", "single")
    return Finding("replication", "ok" if lossless else "warn", found.detail)


def _tenant_boundary(conn: Connection) -> Finding:
    found = boundary.problems(conn)
    if not found:
        return Finding(
            "tenant boundary", "ok", "job logins reach their runs' lease functions and no more"
        )
    return Finding("tenant boundary", "warn", "; ".join(found))


def _leader(conn: Connection, lock_name: str) -> Finding:
    sessions = conn.execute(queries.get("tick_sessions"), {"now": None}).fetchall()
    holders = conn.execute(
        queries.get("leader_lock_holders"), {"lock_name": lock_name, "now": None}
    ).fetchall()
    if not sessions and not holders:
        return Finding(
            "leader",
            "FAIL",
            "no operator replica is connected (no session named pgsched-tick): nothing"
            " schedules runs; is the operator running, with this database?",
        )
    replicas = f"{len(sessions)} replica{'s' if len(sessions) != 1 else ''} connected"
    if holders:
        holder = holders[0]
        foreign = holder["application_name"] != "pgsched-tick"
        detail = f"pid {holder['pid']} ({_client(holder)}) holds the leader lock now; {replicas}"
        if foreign:
            return Finding(
                "leader",
                "warn",
                f"{detail}, but that session is {holder['application_name']!r}, not an"
                f" operator tick: if it keeps the lock, no replica can lead ({lock_name!r})",
            )
        return Finding("leader", "ok", detail)
    led = [row for row in sessions if row["led_last_tick"]]
    if not led:
        return Finding(
            "leader",
            "warn",
            f"{replicas}, none led its latest tick (each found the lock taken, or is busy):"
            ' check the operator logs and pgsched_ticks_total{result="error"}',
        )
    latest = led[0]
    since: timedelta = latest["since"]
    detail = (
        f"pid {latest['pid']} ({_client(latest)}) led the latest tick"
        f" {output.duration(since)} ago; {replicas}"
    )
    if since > STALE_LEADER:
        return Finding("leader", "warn", f"{detail}: no tick led since, are the replicas stuck?")
    return Finding("leader", "ok", detail)


def _client(row: dict[str, Any]) -> str:
    return f"{row['application_name']} from {row['client_addr'] or 'local socket'}"


def _stuck(conn: Connection, queued_threshold: int) -> list[Finding]:
    findings = []
    stale = conn.execute(
        queries.get("stale_running_runs"),
        {"now": None, "slack_seconds": SLACK_SECONDS, "limit": EXAMPLES},
    ).fetchall()
    if stale:
        examples = ", ".join(
            f"run {row['id']} {row['namespace']}/{row['name']}"
            f" ({'never heartbeated' if row['heartbeat_at'] is None else 'heartbeat stale'})"
            for row in stale
        )
        findings.append(
            Finding(
                "running runs",
                "FAIL",
                f"{stale[0]['total']} RUNNING past their heartbeat/orphan timeout, e.g."
                f" {examples}: the reaper has not run, so no replica is leading ticks",
            )
        )
    else:
        findings.append(Finding("running runs", "ok", "no RUNNING run past its heartbeat timeout"))
    overdue = conn.execute(
        queries.get("overdue_queued_runs"),
        {"now": None, "threshold_seconds": queued_threshold, "limit": 1000},
    ).fetchall()
    at_cap = [row for row in overdue if row["running"] >= row["max_concurrent_runs"]]
    free = [row for row in overdue if row["running"] < row["max_concurrent_runs"]]
    if free:
        examples = ", ".join(
            f"run {row['id']} {row['namespace']}/{row['name']}"
            f" (waiting since {output.utc_iso(row['waiting_since'])})"
            for row in free[:EXAMPLES]
        )
        findings.append(
            Finding(
                "queued runs",
                "FAIL",
                f"{len(free)} QUEUED for more than {queued_threshold}s with free slots, e.g."
                f" {examples}: dispatch is not claiming them (is a replica leading?)",
            )
        )
    elif at_cap:
        jobs = sorted({f"{row['namespace']}/{row['name']}" for row in at_cap})
        findings.append(
            Finding(
                "queued runs",
                "warn",
                f"{len(at_cap)} QUEUED for more than {queued_threshold}s, waiting for a slot"
                f" at maxConcurrentRuns (backpressure): {', '.join(jobs[:EXAMPLES])}",
            )
        )
    else:
        findings.append(
            Finding("queued runs", "ok", f"none QUEUED for more than {queued_threshold}s")
        )
    late = conn.execute(
        queries.get("overdue_definitions"),
        {"now": None, "threshold_seconds": queued_threshold, "limit": EXAMPLES},
    ).fetchall()
    if late:
        examples = ", ".join(
            f"{row['namespace']}/{row['name']} (due {output.utc_iso(row['next_run_at'])})"
            for row in late
        )
        findings.append(
            Finding(
                "materialization",
                "FAIL",
                f"{late[0]['total']} ScheduledJobs have an occurrence due for more than"
                f" {queued_threshold}s that was never materialized, e.g. {examples}",
            )
        )
    else:
        findings.append(Finding("materialization", "ok", "every due occurrence is materialized"))
    return findings


def _outbox(conn: Connection) -> Finding:
    row = conn.execute(queries.get("outbox_backlog"), {"now": None}).fetchone()
    assert row is not None
    if row["events"] and row["oldest_age"] > OUTBOX_LAG:
        return Finding(
            "publisher",
            "warn",
            f"{row['events']} run status changes not yet published, the oldest"
            f" {output.duration(row['oldest_age'])} ago: ScheduledJob statuses and Events lag"
            " (Kubernetes API errors? see pgsched_kube_requests_total)",
        )
    return Finding("publisher", "ok", f"{row['events']} run status changes waiting")


def _auto_suspended(conn: Connection) -> Finding:
    rows = conn.execute(queries.get("auto_suspended_definitions")).fetchall()
    if not rows:
        return Finding("auto-suspended", "ok", "no ScheduledJob suspended after failures")
    listed = "; ".join(
        f"{row['namespace']}/{row['name']}: {row['auto_suspend_reason']}" for row in rows[:EXAMPLES]
    )
    return Finding(
        "auto-suspended",
        "warn",
        f"{len(rows)} suspended after repeated failures ({listed}); fix the cause, then"
        " `pgsched resume SJ -n NAMESPACE`",
    )


def _dead_letters(conn: Connection) -> Finding:
    rows = notifications.dead_letters(conn, limit=EXAMPLES)
    if not rows:
        return Finding("notifications", "ok", "no dead-lettered notification")
    total = sum(notifications.dead_counts(conn).values())
    listed = "; ".join(
        f"{row['namespace']}/{row['name']} run {row['run_id']} {row['event']} to"
        f" {row['target_name']} after {row['attempts']} attempts: {row['last_error']}"
        for row in rows
    )
    return Finding(
        "notifications",
        "warn",
        f"{total} notifications were not delivered (dead letters: {listed}); fix the target"
        " (URL, Secret, receiver) in spec.notify: later notifications are sent as usual",
    )


def _kubernetes(args: argparse.Namespace) -> list[Finding]:
    from pgsched.k8s import names
    from pgsched.k8s.client import api

    if not target.has_kubeconfig(args.kubeconfig):
        return [Finding("kubernetes", "skip", "no kubeconfig (pass --kubeconfig to check)")]
    try:
        kube = target.kube(args, attempts=1)
        version = kube.get("/version")
    except common.CommandError as error:
        return [Finding("kubernetes", "FAIL", str(error))]
    except api.ApiError as error:
        return [Finding("kubernetes", "FAIL", f"the API server did not answer: {error}")]
    found = [Finding("kubernetes", "ok", f"API server {version.get('gitVersion', '?')}")]
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{names.PLURAL}.{names.GROUP}"
    try:
        crd = kube.get(path)
    except api.ApiError as error:
        if error.not_found:
            return [
                *found,
                Finding(
                    "crd",
                    "FAIL",
                    f"{names.PLURAL}.{names.GROUP} is not installed: install the Helm chart,"
                    " or kubectl apply -f crds/scheduledjobs.pgsched.dev.yaml",
                ),
            ]
        return [*found, Finding("crd", "warn", f"cannot read the CRD: {error.message}")]
    established = any(
        item.get("type") == "Established" and item.get("status") == "True"
        for item in (crd.get("status") or {}).get("conditions") or []
    )
    served = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
    if not established or names.VERSION not in served:
        return [
            *found,
            Finding(
                "crd",
                "FAIL",
                f"{names.PLURAL}.{names.GROUP} is installed but not established or does not"
                f" serve {names.VERSION} (served: {', '.join(served) or 'none'})",
            ),
        ]
    found.append(
        Finding("crd", "ok", f"{names.PLURAL}.{names.GROUP} established, serves {names.VERSION}")
    )
    return found + _scheduled_jobs(kube, unserved_after=args.unserved_after)


def _scheduled_jobs(kube: Any, *, unserved_after: int) -> list[Finding]:
    """Ready=False and unserved ScheduledJobs, as the API server sees them (all namespaces
    the kubeconfig may list)."""
    from pgsched.k8s import names
    from pgsched.k8s.client import api

    try:
        items = kube.get(f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}").get("items") or []
    except api.ApiError as error:
        why = f"cannot list ScheduledJobs in all namespaces: {error.message}"
        return [Finding("not ready", "skip", why), Finding("unserved", "skip", why)]
    now = clock.local()
    not_ready: list[tuple[str, str]] = []
    unserved: list[str] = []
    for item in items:
        meta = item.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        conditions = (item.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is not None and ready.get("status") == "False":
            not_ready.append((where, str(ready.get("message") or ready.get("reason"))))
        created = names.timestamp(meta.get("creationTimestamp"))
        if ready is None and now - created > timedelta(seconds=unserved_after):
            unserved.append(where)
    if not unserved:
        served = Finding("unserved", "ok", "an operator serves every ScheduledJob")
    else:
        spaces = sorted({name.split("/", 1)[0] for name in unserved})
        served = Finding(
            "unserved",
            "warn",
            f"{len(unserved)} ScheduledJob(s) without any status {unserved_after}s after"
            f" creation ({'; '.join(unserved[:EXAMPLES])}): no operator watches"
            f" {', '.join(spaces)} — label it with the chart's namespaceLabels (kubectl"
            " label namespace NAME pgsched.dev/serve=true), or add it to watchNamespaces"
            " (PGSCHED_NAMESPACES) — or none is running",
        )
    return [_not_ready(not_ready), served]
