"""Validation of a ScheduledJob spec into the engine's definition settings.

The CRD's OpenAPI schema rejects what it can at ``kubectl apply`` (types, enums, ranges,
one schedule kind). Everything it cannot check — that a cron expression parses, that a time
zone exists, that heartbeat timeouts are consistent — is checked here, before anything
touches the database. Every problem found is reported at once, each naming the field, what
is wrong with the value, and a valid example::

    spec.timeZone: unknown time zone 'Europe/Sofiya'; use an IANA name from the tz
    database (example: America/New_York)

The same function validates specs from the operator, the CLI and tests, so a spec the CLI
accepts is a spec the operator accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, cast

from pgsched import schedule
from pgsched.engine import chain, definitions, notifications
from pgsched.engine.definitions import DefinitionSpec
from pgsched.schedule import calendars, zones
from pgsched.spec import bounds, extra, fields, heartbeat, retries, run_at, schedules, upstreams
from pgsched.spec.bounds import MAX_CALENDARS
from pgsched.spec.checker import MAX_INT32, Checker, describe
from pgsched.spec.run_at import RUN_AT_SLACK
from pgsched.spec.schedules import VALIDATION_STEPS
from pgsched.spec.upstreams import MAX_UPSTREAMS
from pgsched.validation import FieldError, Problems, SpecError

__all__ = [
    "MAX_CALENDARS",
    "MAX_INT32",
    "MAX_UPSTREAMS",
    "RUN_AT_SLACK",
    "VALIDATION_STEPS",
    "FieldError",
    "SpecError",
    "calendar",
    "notification_policy",
    "parse",
    "pool_limit",
]  # the errors are validation's, named here too
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
    ``run_at_not_before``: reject a ``runAt`` earlier than this (less :data:`~run_at.RUN_AT_SLACK`)
    unless ``runAtInPast: Run``. The operator passes "now" for a runAt it has not accepted
    before, and None for one it has: a one-shot accepted yesterday is not an error today.
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


def pool_limit(spec: Any) -> int:
    """A ConcurrencyPool spec's ``limit``. Raises :class:`SpecError` naming the field.

    The CRD's schema refuses most of this at ``kubectl apply``; the controller and the
    admission webhook both call this for what slips past it (a CRD installed without its
    schema, an older one)."""
    limit = spec.get("limit") if isinstance(spec, Mapping) else None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_INT32:
        raise SpecError(
            [
                FieldError(
                    "spec.limit",
                    f"must be an integer of at least 1, got {describe(limit)}",
                    "limit: 2",
                )
            ]
        )
    return limit


def calendar(spec: Any, ics_texts: Mapping[str, str]) -> dict[str, Any]:
    """A Calendar spec's resolved form (``schedule.calendars.resolve``). Raises
    :class:`SpecError` naming every bad field; the controller and the admission webhook
    both call it (the webhook without the iCalendar texts, which it does not read)."""
    return calendars.resolve(spec, ics_texts)


def notification_policy(name: Any, spec: Any) -> dict[str, Any]:
    """A NotificationPolicy's spec, as its namespace's jobs use it (the shape of a
    ``spec.notify``). Raises :class:`SpecError` naming every bad field; the controller and
    the admission webhook both call it. Only the policy named ``default`` is in force (one
    per namespace, found without a selector or a ranking), so any other name is refused."""
    problems = Problems()
    if name != notifications.POLICY_NAME:
        problems.add(
            "metadata.name",
            f"{name!r}: a namespace has one NotificationPolicy, named {notifications.POLICY_NAME}",
            f"metadata: {{name: {notifications.POLICY_NAME}}}",
        )
    notifications.parse_policy(spec, problems)
    problems.raise_if_any(SpecError)
    return dict(spec)
