"""A ScheduledJob's status, rendered from the database (pure).

Any replica can render the same status from the same rows, so status patches from two
replicas never disagree for long, and a merge patch needs no resourceVersion. Condition
transition times are carried over from the current status when a condition keeps its
value, as Kubernetes conventions ask.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.engine import definitions
from pgsched.engine.models import Definition, Run
from pgsched.k8s.names import Obj

NEXT_RUNS = 3


def timestamp(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_text(kind: str, text: str) -> str:
    """What the SCHEDULE printer column shows."""
    if kind == "rrule":
        rule = next((line for line in text.splitlines() if "FREQ=" in line.upper()), text)
        return rule.removeprefix("RRULE:")
    if kind == "once":
        return f"once at {text}"
    return text


def render(
    definition: Definition,
    *,
    last_run: Run | None,
    active: int,
    now: datetime,
    current: Obj | None = None,
    pool_found: bool = True,
) -> Obj:
    """The full status of a ScheduledJob whose definition is stored. ``pool_found`` says
    whether the ConcurrencyPool its spec.pool names exists (ignored without spec.pool)."""
    suspended = definition.is_suspended
    upcoming: list[str] = []
    if not suspended and definition.next_run_at is not None and definition.deleted_at is None:
        schedule = definitions.schedule_of(definition)
        after = definition.next_run_at - timedelta(microseconds=1)
        upcoming = [str(timestamp(item.at)) for item in schedule.upcoming(after, count=NEXT_RUNS)]
    observed = max(definition.generation, definition.rejected_generation or 0)
    if definition.rejection:
        ready = _condition(
            "Ready",
            False,
            "InvalidSpec",
            f"generation {definition.rejected_generation} was rejected: {definition.rejection}; "
            f"generation {definition.generation} remains in force",
        )
    else:
        ready = _condition(
            "Ready", True, "Scheduled", f"generation {definition.generation} is scheduled"
        )
    if definition.auto_suspended_at is not None:
        suspension = _condition(
            "Suspended",
            True,
            "TooManyFailures",
            f"{definition.auto_suspend_reason}; resume with `pgsched resume` or by toggling spec.suspend",
        )
    elif definition.suspended:
        suspension = _condition("Suspended", True, "SuspendedBySpec", "spec.suspend is true")
    else:
        suspension = _condition("Suspended", False, "Active", "runs are scheduled")
    conditions = [ready, suspension]
    pool = definition.spec.get("pool")
    if isinstance(pool, str):
        conditions.append(_pool_condition(definition.namespace, pool, pool_found))
    return {
        "observedGeneration": observed,
        "schedule": schedule_text(definition.schedule_kind, definition.schedule),
        "timeZone": definition.time_zone,
        "suspended": suspended,
        "active": active,
        "nextRunAt": upcoming[0] if upcoming else None,
        "nextRuns": upcoming,
        "lastScheduleTime": timestamp(definition.last_scheduled_for),
        "lastRun": _last_run(last_run),
        "conditions": carry_transitions(conditions, current, now=now),
    }


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
        ("cron", ""),
    )
    ready = _condition("Ready", False, "InvalidSpec", message)
    return {
        "observedGeneration": generation,
        "schedule": schedule_text(kind, text),
        "timeZone": spec.get("timeZone", "UTC"),
        "suspended": bool(spec.get("suspend", False)),
        "active": 0,
        "nextRunAt": None,
        "nextRuns": [],
        "conditions": carry_transitions([ready], current, now=now),
    }


def _last_run(run: Run | None) -> Obj | None:
    if run is None:
        return None
    return {
        "id": run.id,
        "attempt": run.attempt,
        "trigger": run.trigger,
        "status": run.status,
        "reason": run.reason,
        "scheduledFor": timestamp(run.scheduled_for),
        "startedAt": timestamp(run.started_at),
        "finishedAt": timestamp(run.finished_at),
        "jobName": run.k8s_job_name,
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


def transitions(old: Obj | None, new: Obj) -> list[Obj]:
    """Conditions whose value changed between two statuses (for Events)."""
    before = {item.get("type"): item.get("status") for item in (old or {}).get("conditions") or []}
    return [
        item for item in new.get("conditions") or [] if before.get(item["type"]) != item["status"]
    ]
