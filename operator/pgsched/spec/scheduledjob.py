"""A ScheduledJob's spec read, section by section, into the engine's ``DefinitionSpec``.

Every section is read before anything is refused, so that one apply reports every problem.
The schedule is built, and its next occurrence looked for, only once the rest is valid:
building it needs the time zone and DST policy the other sections settle.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, cast

from pgsched import schedule
from pgsched.engine import chain, definitions
from pgsched.engine.definitions import DefinitionSpec
from pgsched.schedule import zones
from pgsched.spec import bounds, extra, fields, heartbeat, retries, run_at, schedules, upstreams
from pgsched.spec.checker import Checker, describe
from pgsched.validation import FieldError, SpecError

_DEFAULTS = DefinitionSpec  # every default of a spec field is stated once, there


def parse(
    spec: Mapping[str, Any],
    *,
    hash_seed: str = "",
    anchor: datetime,
    now: datetime,
    run_at_not_before: datetime | None = None,
) -> DefinitionSpec:
    """Validate a ScheduledJob spec. Raises :class:`SpecError` listing every bad field.

    ``anchor`` is the resource's creation time (the RRULE's default DTSTART day) and
    ``now`` is where the next occurrence is looked for, within the budget; a rule with
    none ahead (all in the past) is accepted and simply never runs again.
    ``run_at_not_before``: reject a ``runAt`` earlier than this (less
    :data:`run_at.RUN_AT_SLACK`) unless ``runAtInPast: Run``. The operator passes "now" for a
    runAt it has not accepted before, and None for one it has: a one-shot accepted yesterday
    is not an error today.
    """
    if not isinstance(spec, Mapping):
        raise SpecError([FieldError("spec", f"must be an object, got {describe(spec)}")])
    check = Checker(spec)
    check.unknown(spec, fields.ENGINE_FIELDS | fields.EXTRA_FIELDS, "")

    after = upstreams.after(check)
    mode = check.choice(spec, "afterMode", path="afterMode", options=chain.MODES)
    if "afterMode" in spec and not after:
        check.fail(
            "afterMode",
            "is set but spec.after names no upstream",
            "after: [{scheduledJob: extract}]",
        )
    kind, text = schedules.choice(check, chained=bool(after))
    zone = spec.get("timeZone", _DEFAULTS.time_zone)
    if not check.zone(zone, path="timeZone"):
        zone = _DEFAULTS.time_zone

    dst = check.section("dstPolicy")
    check.unknown(dst, {"gap", "repeat"}, "dstPolicy.")
    gap = check.choice(dst, "gap", path="dstPolicy.gap", options=("shift", "skip"))
    repeat = check.choice(dst, "repeat", path="dstPolicy.repeat", options=("first", "last", "both"))

    max_runs = check.integer(
        spec,
        "maxConcurrentRuns",
        path="maxConcurrentRuns",
        default=_DEFAULTS.max_concurrent_runs,
        minimum=1,
        example="maxConcurrentRuns: 2",
    )
    policy = check.choice(
        spec, "concurrencyPolicy", path="concurrencyPolicy", options=("Queue", "Skip", "Replace")
    )
    max_queued = check.integer(
        spec,
        "maxQueuedRuns",
        path="maxQueuedRuns",
        default=None,
        minimum=1,
        example="maxQueuedRuns: 10",
    )
    starting_deadline = check.integer(
        spec,
        "startingDeadlineSeconds",
        path="startingDeadlineSeconds",
        default=None,
        minimum=1,
        example="startingDeadlineSeconds: 300",
    )
    catch_up = check.choice(spec, "catchUp", path="catchUp", options=("latest", "all", "none"))
    catch_up_limit = check.integer(
        spec,
        "catchUpLimit",
        path="catchUpLimit",
        default=_DEFAULTS.catch_up_limit,
        minimum=1,
        example="catchUpLimit: 24",
    )
    active_deadline = check.integer(
        spec,
        "activeDeadlineSeconds",
        path="activeDeadlineSeconds",
        default=None,
        minimum=1,
        example="activeDeadlineSeconds: 3600",
    )
    retry = retries.policy(check)
    interval, timeout, orphan = heartbeat.timeouts(check)
    grace = check.integer(
        spec,
        "cancelGraceSeconds",
        path="cancelGraceSeconds",
        default=_DEFAULTS.cancel_grace_seconds,
        minimum=0,
        example="cancelGraceSeconds: 30",
    )
    threshold = check.integer(
        spec,
        "failureSuspendThreshold",
        path="failureSuspendThreshold",
        default=None,
        minimum=1,
        example="failureSuspendThreshold: 5",
    )
    suspend = check.boolean("suspend")
    past_policy = check.choice(spec, "runAtInPast", path="runAtInPast", options=("Reject", "Run"))
    window = bounds.window(check)
    extra.validate(check)
    bounds.calendars(check)

    check.problems.raise_if_any(SpecError)
    assert kind is not None and text is not None
    parsed = DefinitionSpec(
        schedule_kind=kind,
        schedule=text,
        time_zone=zone,
        dst_gap=cast(zones.GapPolicy, gap),
        dst_repeat=cast(zones.RepeatPolicy, repeat),
        suspend=suspend,
        max_concurrent_runs=cast(int, max_runs),
        concurrency_policy=cast(Literal["Queue", "Skip", "Replace"], policy),
        max_queued_runs=max_queued,
        starting_deadline_seconds=starting_deadline,
        catch_up=cast(Literal["latest", "all", "none"], catch_up),
        catch_up_limit=cast(int, catch_up_limit),
        active_deadline_seconds=active_deadline,
        retry_policy=retry,
        heartbeat_interval_seconds=interval,
        heartbeat_timeout_seconds=timeout,
        orphan_timeout_seconds=orphan,
        cancel_grace_seconds=cast(int, grace),
        failure_suspend_threshold=threshold,
        after=after,
        after_mode=cast(chain.Mode, mode),
        window=window,
        extra={key: spec[key] for key in fields.EXTRA_FIELDS if key in spec},
    )
    if kind == "none":
        return parsed

    def refused(error: schedule.ScheduleError) -> SpecError:
        return schedules.field_error(parsed, error, hash_seed=hash_seed, anchor=anchor, now=now)

    try:
        built = definitions.build_schedule(parsed, hash_seed=hash_seed, anchor=anchor)
    except schedule.ScheduleError as error:
        raise refused(error) from None
    if kind == "once" and past_policy == "Reject" and run_at_not_before is not None:
        run_at.reject_past(built, text, run_at_not_before)
    try:
        # A rule whose occurrences are all past is valid (it was yesterday, it stays so):
        # it is stored with no next run. The next occurrence must be found within a
        # quarter of the expansion budget, so an accepted schedule keeps headroom.
        built.next_after(now, limit=schedules.VALIDATION_STEPS)
    except schedule.ScheduleError as error:
        # How far ahead the next occurrence lies depends on when the spec is applied: say
        # so, or the same spec seems refused at random (issue 26).
        raise schedules.field_error(
            parsed, error, hash_seed=hash_seed, anchor=anchor, now=now, searched=True
        ) from None
    return parsed
