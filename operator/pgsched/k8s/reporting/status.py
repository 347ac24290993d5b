"""A ScheduledJob's status, rendered from the database (pure).

Any replica can render the same status from the same rows. The writers name the
resourceVersion they rendered against (``Publisher.patch_status``): a status rendered
before a change must not arrive after one rendered from it. Condition
transition times are carried over from the current status when a condition keeps its
value, as Kubernetes conventions ask.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from pgsched import wording
from pgsched.engine import chain, deadlines, definitions, notifications, starts, waits
from pgsched.engine.models import Definition, Run, Start
from pgsched.k8s.names import Obj
from pgsched.schedule import ScheduleError
from pgsched.schedule.calendars import NO_CALENDARS, Calendars

NEXT_RUNS = 3


def timestamp(moment: datetime | None) -> str | None:
    return None if moment is None else wording.instant(moment)


def schedule_text(kind: str, text: str, upstreams: list[str] | None = None) -> str:
    """What the SCHEDULE printer column shows."""
    if kind == "none":
        return f"after {', '.join(upstreams)}" if upstreams else "after upstreams"
    if kind == "rrule":
        rule = next((line for line in text.splitlines() if "FREQ=" in line.upper()), text)
        return rule.removeprefix("RRULE:")
    if kind == "once":
        return f"once at {text}"
    if kind == "union":
        return " | ".join(
            schedule_text(entry["kind"], entry["text"])
            + (f" ({entry['timeZone']})" if "timeZone" in entry else "")
            for entry in json.loads(text)
        )
    return text


def render(
    definition: Definition,
    *,
    last_run: Run | None,
    active: int,
    queued: int = 0,
    now: datetime,
    current: Obj | None = None,
    links: chain.Links | None = None,
    triggered: list[chain.Triggered] | None = None,
    pool_found: bool = True,
    start: Start | None = None,
    wait: waits.Wait | None = None,
    calendars: Calendars = NO_CALENDARS,
    finish_by: deadlines.FinishBy | None = None,
    notify: notifications.Effective | None = None,
    refusal: starts.Refusal | None = None,
) -> Obj:
    """The full status of a ScheduledJob whose definition is stored.

    ``start`` is what is known of the last run's start (``engine.starts``): while its
    workload has not started, ``lastRun.status`` is ``LAUNCHING`` and ``lastRun.launching``
    says why (the pod's own reason); the ``Launchable`` condition is False when the last
    run ended because its workload could not start.

    ``links`` (its upstreams and downstreams) and ``triggered`` (the runs its last run
    queued downstream) show the chain both ways. ``pool_found`` says whether the
    ConcurrencyPool its spec.pool names exists (ignored without spec.pool): without it
    no run can start, so the job is not Ready. ``wait`` is what its oldest queued run waits
    for (``engine.waits``), shown as ``waiting``. ``calendars``: those its
    spec.calendars.exclude names (``engine.calendars.load``): ``nextRuns`` leaves out the
    occurrences they exclude, and ``CalendarsReady`` names any that does not exist.
    ``finish_by``: the last run's spec.deadline (``engine.deadlines``), shown as
    ``lastRun.finishBy`` and, once missed, ``lastRun.deadlineMissedAt``. ``notify``: what
    its changes notify and where that comes from (``notifications.effective``), shown as
    ``notifications``. ``refusal``: why no run of this spec can start, if none can
    (``starts.refusal``): the job is not Ready, with that run's reason.

    ``lastRun`` is the newest run that has started, any trigger (so LAST STATUS shows
    RUNNING while it runs, and never a SKIPPED occurrence); ``lastRunTime`` its start (LAST
    RUN); ``lastScheduleTime`` the latest occurrence the schedule produced, run or skipped
    (LAST SCHEDULE); ``queued`` the runs waiting (QUEUED)."""
    suspended = definition.is_suspended
    upcoming: list[str] = []
    if not suspended and definition.next_run_at is not None and definition.deleted_at is None:
        after = definition.next_run_at - timedelta(microseconds=1)
        try:
            schedule = definitions.schedule_of(definition)
            upcoming = [
                str(timestamp(at.at))
                for at in schedule.upcoming(after, count=NEXT_RUNS, exclusions=calendars)
            ]
        except ScheduleError:
            # Stored by an older release that accepted what this one rejects (the resume
            # handler records the rejection): no predictions, the rest of the status renders.
            upcoming = []
    observed = max(definition.generation, definition.rejected_generation or 0)
    pool = definition.spec.get("pool")
    pool_name = pool if isinstance(pool, str) else None
    ready = _ready(
        definition,
        pool_missing=pool_name is not None and not pool_found,
        stranded_by=_stranding_upstreams(definition, links.upstreams if links else []),
        now=now,
        refusal=refusal,
    )
    if definition.auto_suspended_at is not None:
        suspension = _condition(
            "Suspended",
            True,
            "TooManyFailures",
            f"{definition.auto_suspend_reason}; resume with `pgsched resume` or by toggling spec.suspend",
        )
    elif definition.suspended:
        suspension = _condition("Suspended", True, "SuspendedBySpec", definition.suspended_why)
    else:
        suspension = _condition("Suspended", False, "Active", _not_suspended(definition, now))
    conditions = [ready, suspension]
    chain_status: Obj = {}
    if links is not None and links.upstreams:
        conditions.append(_upstreams_condition(definition, links.upstreams))
        chain_status["after"] = [
            {"scheduledJob": item.scheduled_job, "outcome": item.outcome, "found": item.found}
            for item in links.upstreams
        ]
        chain_status["afterMode"] = definition.after_mode
    if links is not None and links.downstreams:
        chain_status["downstreams"] = links.downstreams
    last = _last_run(last_run, start, finish_by)
    conditions.append(_launchable(last_run))
    if last is not None and last_run is not None and last_run.upstream_run_id is not None:
        last["upstreamRunId"] = last_run.upstream_run_id
    if last is not None and triggered:
        last["triggeredRuns"] = [
            {"scheduledJob": item.scheduled_job, "runId": item.run_id, "status": item.status}
            for item in triggered
        ]
    upstream_names = [item.scheduled_job for item in links.upstreams] if links else []
    if definition.schedule_kind == "once":
        conditions.append(_completion(definition, last_run, active=active, queued=queued))
    if pool_name is not None:
        conditions.append(_pool_condition(definition.namespace, pool_name, pool_found))
    if calendars.found or calendars.missing:
        conditions.append(_calendars_condition(definition.namespace, calendars))
    return {
        "observedGeneration": observed,
        "schedule": schedule_text(definition.schedule_kind, definition.schedule, upstream_names),
        "timeZone": definition.time_zone,
        "suspended": suspended,
        # The pgsched.dev/suspend-reason annotation the definition holds (the sync compares
        # the annotation with it, so a changed reason is stored and shown without a read).
        "suspendReason": definition.suspend_reason,
        "active": active,
        "queued": queued,
        "nextRunAt": upcoming[0] if upcoming else None,
        "nextRuns": upcoming,
        "lastScheduleTime": timestamp(definition.last_scheduled_for),
        "lastRunTime": timestamp(last_run.started_at) if last_run else None,
        "lastRun": last,
        "waiting": _waiting(wait, current, now=now),
        "notifications": notify.as_json() if notify else None,
        "conditions": carry_transitions(conditions, current, now=now),
        **chain_status,
    }


def _waiting(wait: waits.Wait | None, current: Obj | None, *, now: datetime) -> Obj | None:
    """What the oldest queued run waits for, ``since`` when (kept while the run and the
    reason stay the same, like a condition's lastTransitionTime), in the lasting words:
    the status is not rendered again when another job's run leaves a pool, nor as a
    deadline comes closer (``waits.Wait``)."""
    if wait is None:
        return None
    before = (current or {}).get("waiting") or {}
    same = (before.get("runId"), before.get("reason")) == (wait.run_id, wait.reason)
    return {
        "runId": wait.run_id,
        "reason": wait.reason,
        "message": wait.lasting,  # stored: what stays true while it waits
        "since": before.get("since") if same else timestamp(now),
    }


def _stranding_upstreams(definition: Definition, upstreams: list[chain.UpstreamState]) -> list[str]:
    """The missing upstreams that keep every run of a job from starting: it has no
    schedule of its own, and with afterMode All one missing upstream is enough, with Any
    it takes all of them. (A job with a schedule runs on it whatever its chain.)"""
    missing = [item.scheduled_job for item in upstreams if not item.found]
    if definition.schedule_kind != "none" or not missing:
        return []
    if definition.after_mode == "All" or len(missing) == len(upstreams):
        return missing
    return []


def _not_suspended(definition: Definition, now: datetime) -> str:
    """The Suspended=False message: whether runs are still to come, which a finished
    active window or a schedule without occurrences left settles, suspended or not."""
    more = definition.next_run_at is not None
    window = definition.window
    outside = window.note(now, more=more) if window else None
    if window is not None and outside is not None:
        if window.state(now, more=more) == "ActiveWindowEnded":
            return f"not suspended, but its active window {outside}"
        return f"runs are scheduled once it is active: {outside}"
    if not more and definition.schedule_kind != "none":
        return "not suspended, but its schedule has no occurrence left: no more runs"
    return "runs are scheduled"


def _ready(
    definition: Definition,
    *,
    pool_missing: bool,
    stranded_by: list[str],
    now: datetime,
    refusal: starts.Refusal | None = None,
) -> Obj:
    generation = definition.generation
    if definition.rejection:
        return _condition(
            "Ready",
            False,
            "InvalidSpec",
            f"generation {definition.rejected_generation} was rejected: {definition.rejection}; "
            f"generation {generation} remains in force",
        )
    if stranded_by:
        # As for a missing pool (below): the job is valid, and can never start as things are.
        # Among the causes, a ScheduledJob whose own spec was refused (a cycle's other
        # member): it was never stored, so only its own status can say why.
        return _condition(
            "Ready",
            False,
            "UpstreamMissing",
            f"spec.after names {', '.join(stranded_by)}, which does not exist in namespace"
            f" {definition.namespace} (or its spec was refused: see its status); no run of"
            f" generation {generation} can start until it does",
        )
    if refusal is not None:
        return _condition(
            "Ready", False, refusal.reason, starts.refused_message(refusal, generation)
        )
    if pool_missing:
        pool = definition.spec["pool"]
        return _condition(
            "Ready",
            False,
            "PoolNotFound",
            f"ConcurrencyPool {pool} does not exist in namespace {definition.namespace}:"
            f" no run of generation {generation} can start until it does",
        )
    window = definition.window
    outside = window.note(now, more=definition.next_run_at is not None) if window else None
    if window is not None and outside is not None:
        # spec.activeFrom / activeUntil: which side of the window the job is on.
        return _condition(
            "Ready",
            True,
            window.state(now, more=definition.next_run_at is not None),
            f"generation {generation} is valid but {outside}",
        )
    if definition.next_run_at is None and definition.schedule_kind == "once":
        return _condition(
            "Ready",
            True,
            "NoFutureOccurrences",
            f"generation {generation} is valid and its one occurrence"
            f" ({timestamp(definition.last_scheduled_for) or definition.schedule}) has come:"
            " no more runs (the Completed condition says how it ended)",
        )
    if definition.next_run_at is None and definition.schedule_kind != "none":
        # All of the rule's occurrences are past (UNTIL or COUNT ran out): still valid, as
        # it was when applied, but nothing more will run (docs/configuration.md).
        return _condition(
            "Ready",
            True,
            "NoFutureOccurrences",
            f"generation {generation} is valid but its schedule has no occurrence"
            f" after {timestamp(definition.last_scheduled_for or now)}: no more runs",
        )
    return _condition("Ready", True, "Scheduled", f"generation {generation} is scheduled")


def _completion(definition: Definition, last_run: Run | None, *, active: int, queued: int) -> Obj:
    """A one-shot's ``Completed`` condition: True once its occurrence is materialized and
    nothing of it is queued or running any more (retries included); the reason says how it
    ended: ``Succeeded``, ``Failed``, ``Cancelled`` or ``NotRun`` (skipped)."""
    # A failure is followed by a retry or by a NOT_RETRIED note: either refreshes the status.
    deciding = last_run is not None and last_run.status == "FAILED" and not last_run.settled_at
    if definition.next_run_at is not None or active or queued or deciding:
        when = timestamp(definition.next_run_at) if definition.next_run_at else None
        waiting = f"due at {when}" if when else f"{active} running, {queued} queued"
        if deciding:
            waiting = "deciding whether to retry its last run"
        return _condition("Completed", False, "Pending", f"the one-shot is {waiting}")
    if last_run is None:
        return _condition(
            "Completed", True, "NotRun", "the one-shot never started (see `pgsched runs`)"
        )
    how = {"COMPLETED": "Succeeded", "CANCELLED": "Cancelled"}.get(last_run.status, "Failed")
    detail = f": {last_run.reason}" if last_run.reason else ""
    return _condition(
        "Completed",
        True,
        how,
        f"run {last_run.id} (attempt {last_run.attempt}) ended {last_run.status}{detail}"
        f" at {timestamp(last_run.finished_at)}",
    )


def _upstreams_condition(definition: Definition, upstreams: list[chain.UpstreamState]) -> Obj:
    missing = [item.scheduled_job for item in upstreams if not item.found]
    if missing:
        return _condition(
            "UpstreamsFound",
            False,
            "UpstreamMissing",
            f"spec.after names {', '.join(missing)}, which does not exist in namespace"
            f" {definition.namespace}; chained runs start once it does",
        )
    return _condition(
        "UpstreamsFound", True, "Found", f"every upstream in spec.after exists ({len(upstreams)})"
    )


def _pool_condition(namespace: str, pool: str, found: bool) -> Obj:
    if found:
        return _condition(
            "PoolReady", True, "PoolFound", f"runs start while ConcurrencyPool {pool} has room"
        )
    return _condition(
        "PoolReady",
        False,
        "PoolNotFound",
        f"ConcurrencyPool {pool} does not exist in namespace {namespace}; runs stay QUEUED"
        " until it does",
    )


def _calendars_condition(namespace: str, calendars: Calendars) -> Obj:
    if calendars.missing:
        return _condition(
            "CalendarsReady",
            False,
            "CalendarNotFound",
            f"Calendar {', '.join(calendars.missing)} (spec.calendars.exclude) does not exist in"
            f" namespace {namespace}; occurrences are not checked against it until it does",
        )
    names = ", ".join(item.name for item in calendars.found)
    return _condition(
        "CalendarsReady", True, "CalendarsFound", f"occurrences on days of {names} are skipped"
    )


def render_rejected(
    spec: Obj, *, generation: int, message: str, now: datetime, current: Obj | None
) -> Obj:
    """Status of a ScheduledJob that never had a valid generation."""
    kind, text = next(
        (
            (kind, spec[field])
            for field, kind in (("schedule", "cron"), ("rrule", "rrule"), ("runAt", "once"))
            if isinstance(spec.get(field), str)
        ),
        ("none", ""),
    )
    entries = spec.get("schedules")
    if isinstance(entries, list):
        kind, text = (
            "cron",
            " | ".join(
                str(item.get("schedule") or item.get("rrule") or "")
                for item in entries
                if isinstance(item, dict)
            ),
        )
    # A job that only runs after others (say, the member of a cycle refused) shows them.
    after = spec.get("after")
    upstreams = [
        str(item["scheduledJob"])
        for item in (after if isinstance(after, list) else [])
        if isinstance(item, dict) and isinstance(item.get("scheduledJob"), str)
    ]
    ready = _condition("Ready", False, "InvalidSpec", message)
    return {
        "observedGeneration": generation,
        "schedule": schedule_text(kind, text, upstreams) if kind != "none" or upstreams else "",
        "timeZone": spec.get("timeZone", "UTC"),
        "suspended": bool(spec.get("suspend", False)),
        "active": 0,
        "queued": 0,
        "nextRunAt": None,
        "nextRuns": [],
        "conditions": carry_transitions([ready], current, now=now),
    }


def _launchable(last_run: Run | None) -> Obj:
    if last_run is not None and last_run.reason in starts.REASONS:
        return _condition(
            "Launchable",
            False,
            str(last_run.reason),
            f"run {last_run.id} could not start: {last_run.error}",
        )
    return _condition("Launchable", True, "Launched", "the last run did not fail to start")


def _last_run(
    run: Run | None, start: Start | None = None, finish_by: deadlines.FinishBy | None = None
) -> Obj | None:
    if run is None:
        return None
    status = starts.shown_status(run, start)
    shown: Obj = {}
    if status == starts.LAUNCHING and start is not None:
        shown["launching"] = {
            "reason": start.waiting_reason,
            "message": start.waiting_message,
            "until": timestamp(start.bound_at),
        }
    elif start is not None and start.workload_started_at is not None:
        shown["workloadStartedAt"] = timestamp(start.workload_started_at)
    if finish_by is not None:
        shown["finishBy"] = timestamp(finish_by.deadline_at)
        if finish_by.missed_at is not None:
            shown["deadlineMissedAt"] = timestamp(finish_by.missed_at)
    return {
        "id": run.id,
        "attempt": run.attempt,
        "trigger": run.trigger,
        "status": status,
        **shown,
        # LAUNCHING: the pod's reason for not starting yet (the REASON column shows it).
        "reason": start.waiting_reason if status == starts.LAUNCHING and start else run.reason,
        "scheduledFor": timestamp(run.scheduled_for),
        "startedAt": timestamp(run.started_at),
        "finishedAt": timestamp(run.finished_at),
        "jobName": run.k8s_job_name,
        "cancelledBy": run.cancelled_by,
    }


def _condition(kind: str, value: bool, reason: str, message: str) -> Obj:
    return {
        "type": kind,
        "status": "True" if value else "False",
        "reason": reason,
        "message": message,
    }


def carry_transitions(conditions: list[Obj], current: Obj | None, *, now: datetime) -> list[Obj]:
    """Stamp lastTransitionTime: kept from ``current`` while a condition's value holds."""
    previous = {item.get("type"): item for item in (current or {}).get("conditions") or []}
    stamped = []
    for condition in conditions:
        before = previous.get(condition["type"])
        same = before is not None and before.get("status") == condition["status"]
        moment = before.get("lastTransitionTime") if same and before else timestamp(now)
        stamped.append({**condition, "lastTransitionTime": moment})
    return stamped


def versioned_patch(current: Obj, new: Obj) -> Obj:
    """The merge patch that writes the status ``new``, naming the resourceVersion of
    ``current`` (the object it was rendered against) when known: the API server refuses
    it (409) if the object changed since."""
    version = (current.get("metadata") or {}).get("resourceVersion")
    return {"metadata": {"resourceVersion": version}, "status": new} if version else {"status": new}


def transitions(old: Obj | None, new: Obj) -> list[Obj]:
    """Conditions whose value changed between two statuses (for Events)."""
    before = {item.get("type"): item.get("status") for item in (old or {}).get("conditions") or []}
    return [
        item for item in new.get("conditions") or [] if before.get(item["type"]) != item["status"]
    ]
