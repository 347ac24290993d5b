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

import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from pgsched import names, schedule
from pgsched.engine import chain, deadlines, definitions, jitter, notifications, parameters, starts
from pgsched.engine.definitions import DefinitionSpec
from pgsched.engine.retry import ANY_REASON, REASONS, Backoff, RetryPolicy
from pgsched.schedule import budget, calendars, timeline, union, zones
from pgsched.schedule import window as windows
from pgsched.spec import fields
from pgsched.spec.checker import MAX_INT32, Checker, describe
from pgsched.validation import FieldError, Problems, SpecError

VALIDATION_STEPS = budget.MAX_STEPS // 4


MAX_UPSTREAMS = 20
__all__ = [
    "MAX_INT32",
    "FieldError",
    "SpecError",
    "calendar",
    "notification_policy",
    "parse",
    "pool_limit",
]  # the errors are validation's, named here too
_DEFAULTS = DefinitionSpec  # every default of a spec field is stated once, there


# A runAt this much before "now" is still taken as meant (an apply that took a while).
RUN_AT_SLACK = timedelta(seconds=60)


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
    ``run_at_not_before``: reject a ``runAt`` earlier than this (less :data:`RUN_AT_SLACK`)
    unless ``runAtInPast: Run``. The operator passes "now" for a runAt it has not accepted
    before, and None for one it has: a one-shot accepted yesterday is not an error today.
    """
    if not isinstance(spec, Mapping):
        raise SpecError([FieldError("spec", f"must be an object, got {describe(spec)}")])
    check = Checker(spec)
    check.unknown(spec, fields.ENGINE_FIELDS | fields.EXTRA_FIELDS, "")

    after = _after(check)
    mode = check.choice(spec, "afterMode", path="afterMode", options=chain.MODES)
    if "afterMode" in spec and not after:
        check.fail(
            "afterMode",
            "is set but spec.after names no upstream",
            "after: [{scheduledJob: extract}]",
        )
    kind, text = _schedule_choice(check, chained=bool(after))
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
    retry = _retry_policy(check)
    interval, timeout, orphan = _heartbeat(check)
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
    window = _window(check)
    _extra_fields(check)
    _calendars(check)

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
        return _schedule_field_error(parsed, error, hash_seed=hash_seed, anchor=anchor, now=now)

    try:
        built = definitions.build_schedule(parsed, hash_seed=hash_seed, anchor=anchor)
    except schedule.ScheduleError as error:
        raise refused(error) from None
    if kind == "once" and past_policy == "Reject" and run_at_not_before is not None:
        _reject_past_run_at(built, text, run_at_not_before)
    try:
        # A rule whose occurrences are all past is valid (it was yesterday, it stays so):
        # it is stored with no next run. The next occurrence must be found within a
        # quarter of the expansion budget, so an accepted schedule keeps headroom.
        built.next_after(now, limit=VALIDATION_STEPS)
    except schedule.ScheduleError as error:
        # How far ahead the next occurrence lies depends on when the spec is applied: say
        # so, or the same spec seems refused at random (issue 26).
        raise _schedule_field_error(
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


def _reject_past_run_at(built: timeline.Stream, text: str, not_before: datetime) -> None:
    first = built.next_after(datetime(1970, 1, 1, tzinfo=UTC))
    if first is None or first.at >= not_before - RUN_AT_SLACK:
        return
    late = not_before - first.at
    ahead = (not_before + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise SpecError(
        [
            FieldError(
                "spec.runAt",
                f"{text!r} is {_how_long(late)} in the past (now"
                f" {not_before:%Y-%m-%dT%H:%M:%SZ}), so it would run at once; fix the date,"
                " or set runAtInPast: Run to run it now on purpose",
                f"runAt: '{ahead}'",
            )
        ]
    )


def _how_long(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"


def _schedule_choice(
    check: Checker, *, chained: bool
) -> tuple[schedule.ScheduleKind | None, str | None]:
    given = [
        name for name in (*fields.SCHEDULE_FIELDS, "schedules") if check.spec.get(name) is not None
    ]
    if not given and chained:
        return "none", ""  # runs only after its upstreams (or by hand)
    if len(given) != 1:
        what = "none is set" if not given else f"{' and '.join(given)} are all set"
        check.fail(
            "schedule",
            f"exactly one of schedule, rrule, runAt or schedules must be set (or none, with"
            f" spec.after); {what}",
            "schedule: '0 8 * * *'",
        )
        return None, None
    name = given[0]
    if name == "schedules":
        return _schedules(check)
    text = check.spec[name]
    if not isinstance(text, str) or not text.strip():
        check.fail(name, f"must be a non-empty string, got {describe(text)}", "'0 8 * * *'")
        return None, None
    return cast(schedule.ScheduleKind, fields.SCHEDULE_FIELDS[name]), text.strip()


_ENTRY_EXAMPLE = "schedules: [{schedule: '30 8 * * 1-5'}, {schedule: '0 10 * * 6'}]"


def _schedules(check: Checker) -> tuple[schedule.ScheduleKind | None, str | None]:
    """``spec.schedules``: each entry a cron (``schedule``) or an ``rrule``, with an
    optional ``timeZone`` of its own; stored as one ``union`` schedule."""
    value = check.spec["schedules"]
    if not isinstance(value, list) or not 1 <= len(value) <= union.MAX_ENTRIES:
        check.fail(
            "schedules",
            f"must be a list of 1..{union.MAX_ENTRIES} entries, got {describe(value)}"
            + (f" of {len(value)}" if isinstance(value, list) else ""),
            _ENTRY_EXAMPLE,
        )
        return None, None
    entries: list[tuple[schedule.ScheduleKind, str, str | None]] = []
    for index, item in enumerate(value):
        path = f"schedules[{index}]"
        if not isinstance(item, Mapping):
            check.fail(path, f"must be an object, got {describe(item)}", _ENTRY_EXAMPLE)
            continue
        check.unknown(item, {"schedule", "rrule", "timeZone"}, f"{path}.")
        kinds = [name for name in ("schedule", "rrule") if item.get(name) is not None]
        if len(kinds) != 1:
            check.fail(
                path, "must set exactly one of schedule or rrule", "{schedule: '0 10 * * 6'}"
            )
            continue
        text = item[kinds[0]]
        if not isinstance(text, str) or not text.strip():
            check.fail(f"{path}.{kinds[0]}", f"must be a non-empty string, got {describe(text)}")
            continue
        zone = item.get("timeZone")
        if zone is not None and not check.zone(zone, path=f"{path}.timeZone"):
            continue
        kind = cast(schedule.ScheduleKind, fields.SCHEDULE_FIELDS[kinds[0]])
        entries.append((kind, text.strip(), zone))
    if len(entries) != len(value):
        return None, None
    return "union", schedule.union_text(entries)


def _schedule_field_error(
    parsed: DefinitionSpec,
    error: schedule.ScheduleError,
    *,
    hash_seed: str,
    anchor: datetime,
    now: datetime,
    searched: bool = False,
) -> SpecError:
    """The field a schedule error belongs to: the single-entry field, or the entry of
    ``spec.schedules`` that fails on its own (else the list as a whole). ``searched``: the
    error came from looking for the next occurrence from ``now``, which the message says."""

    def said(message: str) -> str:
        if not searched:
            return message
        return (
            f"{message} (searched from {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}, when"
            " it was applied: applied at another time it may be found in reach)"
        )

    kind = parsed.schedule_kind
    if kind != "union":
        field_name = next(name for name, value in fields.SCHEDULE_FIELDS.items() if value == kind)
        return SpecError([FieldError(f"spec.{field_name}", said(error.message), error.example)])
    entries = json.loads(parsed.schedule)
    for index, entry in enumerate(entries):
        single = dataclasses.replace(
            parsed,
            schedule_kind=entry["kind"],
            schedule=entry["text"],
            time_zone=entry.get("timeZone", parsed.time_zone),
        )
        try:
            definitions.build_schedule(single, hash_seed=hash_seed, anchor=anchor).next_after(
                now, limit=VALIDATION_STEPS // len(entries)
            )
        except schedule.ScheduleError as own:
            field_name = "schedule" if entry["kind"] == "cron" else "rrule"
            return SpecError(
                [
                    FieldError(
                        f"spec.schedules[{index}].{field_name}", said(own.message), own.example
                    )
                ]
            )
    return SpecError([FieldError("spec.schedules", said(error.message), error.example)])


MAX_CALENDARS = 10


def _calendars(check: Checker) -> None:
    section = check.section("calendars")
    check.unknown(section, {"exclude"}, "calendars.")
    value = section.get("exclude", [])
    example = "calendars: {exclude: [bank-holidays]}"
    if not isinstance(value, list) or len(value) > MAX_CALENDARS:
        check.fail(
            "calendars.exclude",
            f"must be a list of at most {MAX_CALENDARS} Calendar names",
            example,
        )
        return
    for index, name in enumerate(value):
        if not isinstance(name, str) or not names.OBJECT_NAME.match(name):
            check.fail(f"calendars.exclude[{index}]", f"{name!r} is not a Calendar name", example)
        elif value.index(name) != index:
            check.fail(f"calendars.exclude[{index}]", f"{name!r} is named twice", example)


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


def _after(check: Checker) -> tuple[chain.Upstream, ...]:
    value = check.spec.get("after")
    example = "after: [{scheduledJob: extract, outcome: Succeeded}]"
    if value is None:
        return ()
    if not isinstance(value, list):
        check.fail("after", f"must be a list of upstreams, got {describe(value)}", example)
        return ()
    if len(value) > MAX_UPSTREAMS:
        check.fail("after", f"names {len(value)} upstreams, at most {MAX_UPSTREAMS}", example)
        return ()
    found: list[chain.Upstream] = []
    for index, item in enumerate(value):
        path = f"after[{index}]"
        if not isinstance(item, Mapping):
            check.fail(path, f"must be an object, got {describe(item)}", example)
            continue
        if True in item or "true" in item:
            # YAML 1.1 (kubectl, PyYAML) reads an unquoted `on:` key as the boolean true.
            check.fail(
                f"{path}.on", "is not a field (YAML reads `on` as true): use outcome", example
            )
        rest = {key: value for key, value in item.items() if key not in (True, "true")}
        check.unknown(rest, {"scheduledJob", "outcome"}, f"{path}.")
        name = item.get("scheduledJob")
        if not isinstance(name, str) or not names.OBJECT_NAME.match(name):
            check.fail(
                f"{path}.scheduledJob",
                f"{name!r} is not a ScheduledJob name in this namespace",
                "scheduledJob: extract",
            )
            continue
        if any(upstream.scheduled_job == name for upstream in found):
            check.fail(f"{path}.scheduledJob", f"{name!r} is named twice", example)
            continue
        outcome = check.choice(item, "outcome", path=f"{path}.outcome", options=chain.OUTCOMES)
        found.append(chain.Upstream(name, cast(chain.Outcome, outcome)))
    return tuple(found)


def _window(check: Checker) -> windows.Window | None:
    bounds: dict[str, datetime] = {}
    for key in (windows.FROM, windows.UNTIL):
        if check.spec.get(key) is None:
            continue
        value = check.spec[key]
        try:
            if not isinstance(value, str):
                raise ValueError(f"must be an RFC 3339 timestamp string, got {describe(value)}")
            bounds[key] = timeline.utc(windows.parse_instant(value))
        except ValueError as error:
            check.fail(key, str(error), f"{key}: '2027-01-01T00:00:00Z'")
    start, end = bounds.get(windows.FROM), bounds.get(windows.UNTIL)
    if start is not None and end is not None and end < start:
        check.fail(
            windows.UNTIL,
            f"{check.spec[windows.UNTIL]!r} is before activeFrom {check.spec[windows.FROM]!r}",
            "activeUntil: '2027-12-31T23:59:59Z'",
        )
    if start is None and end is None:
        return None
    return windows.Window(start, end)


def _retry_policy(check: Checker) -> RetryPolicy:
    section = check.section("retryPolicy")
    check.unknown(section, {"maxAttempts", "backoff", "retryOn", "neverRetryOn"}, "retryPolicy.")
    defaults = RetryPolicy()
    attempts = check.integer(
        section,
        "maxAttempts",
        path="retryPolicy.maxAttempts",
        default=defaults.max_attempts,
        minimum=1,
        example="maxAttempts: 3",
    )
    backoff_section: Mapping[str, Any] = section.get("backoff") or {}
    if not isinstance(backoff_section, Mapping):
        check.fail(
            "retryPolicy.backoff",
            f"must be an object, got {describe(backoff_section)}",
            "backoff: {initialSeconds: 10, maxSeconds: 600}",
        )
        backoff_section = {}
    check.unknown(
        backoff_section,
        {"initialSeconds", "maxSeconds", "multiplier", "jitter"},
        "retryPolicy.backoff.",
    )
    base = Backoff()
    initial = check.number(
        backoff_section,
        "initialSeconds",
        path="retryPolicy.backoff.initialSeconds",
        default=base.initial_seconds,
        minimum=0,
        maximum=86400,
        example="initialSeconds: 10",
    )
    maximum = check.number(
        backoff_section,
        "maxSeconds",
        path="retryPolicy.backoff.maxSeconds",
        default=max(base.max_seconds, initial),
        minimum=0,
        maximum=604800,
        example="maxSeconds: 600",
    )
    if maximum < initial:
        check.fail(
            "retryPolicy.backoff.maxSeconds",
            f"{maximum:g} is less than initialSeconds {initial:g}",
            f"maxSeconds: {max(600, initial):g}",
        )
    multiplier = check.number(
        backoff_section,
        "multiplier",
        path="retryPolicy.backoff.multiplier",
        default=base.multiplier,
        minimum=1,
        maximum=10,
        example="multiplier: 2",
    )
    jitter = check.number(
        backoff_section,
        "jitter",
        path="retryPolicy.backoff.jitter",
        default=base.jitter,
        minimum=0,
        maximum=1,
        example="jitter: 0.2",
    )
    retry_on = _reasons(check, section, "retryOn", default=defaults.retry_on)
    never = _reasons(check, section, "neverRetryOn", default=())
    return RetryPolicy(
        max_attempts=cast(int, attempts),
        backoff=Backoff(initial, maximum, multiplier, jitter),
        retry_on=retry_on,
        never_retry_on=never,
    )


def _reasons(
    check: Checker, section: Mapping[str, Any], key: str, *, default: tuple[str, ...]
) -> tuple[str, ...]:
    path = f"retryPolicy.{key}"
    value = section.get(key)
    if value is None:
        return default
    example = f"{key}: [NonZeroExit, HeartbeatLost]"
    if not isinstance(value, list):
        check.fail(path, f"must be a list of failure reasons, got {describe(value)}", example)
        return default
    for index, reason in enumerate(value):
        if not isinstance(reason, str) or not (
            reason == ANY_REASON or names.DOTTED_NAME.match(reason)
        ):
            check.fail(
                f"{path}[{index}]",
                f"{reason!r} is not a failure reason: use one of {', '.join(sorted(REASONS))},"
                " an exception class name of an SDK job, or '*'",
                example,
            )
    return tuple(str(reason) for reason in value)


def _heartbeat(check: Checker) -> tuple[int, int, int]:
    section = check.section("heartbeat")
    check.unknown(
        section, {"intervalSeconds", "timeoutSeconds", "orphanTimeoutSeconds"}, "heartbeat."
    )
    interval = check.integer(
        section,
        "intervalSeconds",
        path="heartbeat.intervalSeconds",
        default=_DEFAULTS.heartbeat_interval_seconds,
        minimum=1,
        example="intervalSeconds: 10",
    )
    interval = interval or _DEFAULTS.heartbeat_interval_seconds
    timeout = check.integer(
        section,
        "timeoutSeconds",
        path="heartbeat.timeoutSeconds",
        default=max(_DEFAULTS.heartbeat_timeout_seconds, 3 * interval),
        minimum=1,
        example=f"timeoutSeconds: {3 * interval}",
    )
    timeout = timeout or 60
    # A timeout shorter than two intervals reaps a healthy job after one slow heartbeat.
    if timeout < 2 * interval:
        check.fail(
            "heartbeat.timeoutSeconds",
            f"{timeout} must be at least twice intervalSeconds ({interval})",
            f"timeoutSeconds: {3 * interval}",
        )
    orphan = check.integer(
        section,
        "orphanTimeoutSeconds",
        path="heartbeat.orphanTimeoutSeconds",
        default=max(_DEFAULTS.orphan_timeout_seconds, timeout),
        minimum=1,
        example="orphanTimeoutSeconds: 300",
    )
    orphan = orphan or 300
    if orphan < timeout:
        check.fail(
            "heartbeat.orphanTimeoutSeconds",
            f"{orphan} must be at least timeoutSeconds ({timeout}): a job's first heartbeat"
            " can come later than its next ones (image pull, start-up)",
            f"orphanTimeoutSeconds: {max(300, timeout)}",
        )
    return interval, timeout, orphan


def _extra_fields(check: Checker) -> None:
    notifications.parse(check.spec.get("notify"), check.problems)
    deadlines.parse(check.spec.get("deadline"), check.problems)
    for key in ("successfulRunsHistoryLimit", "failedRunsHistoryLimit"):
        check.integer(check.spec, key, path=key, default=None, minimum=0, example=f"{key}: 3")
    # Read from the stored spec by engine.starts (with its defaults).
    for key, default in (
        ("startTimeoutSeconds", starts.START_TIMEOUT_SECONDS),
        ("admissionTimeoutSeconds", starts.ADMISSION_TIMEOUT_SECONDS),
    ):
        check.integer(
            check.spec, key, path=key, default=None, minimum=1, example=f"{key}: {default}"
        )
    spread = check.integer(
        check.spec,
        jitter.FIELD,
        path=jitter.FIELD,
        default=0,
        minimum=0,
        example="jitterSeconds: 300",
    )
    if spread is not None and spread > jitter.MAX_SECONDS:
        check.fail(
            jitter.FIELD,
            f"{spread} is more than {jitter.MAX_SECONDS} (an hour): a longer delay is a"
            " different schedule, not jitter",
            "jitterSeconds: 300",
        )
    for path, message in parameters.check_declarations(check.spec.get(parameters.FIELD))[1]:
        check.fail(path, message, parameters.EXAMPLE)
    pool = check.spec.get("pool")
    if pool is not None and not (isinstance(pool, str) and names.OBJECT_NAME.match(pool)):
        check.fail(
            "pool",
            f"{pool!r} is not a ConcurrencyPool name (lowercase letters, digits, '-' or '.')",
            "pool: warehouse",
        )
    template = check.spec.get("jobTemplate")
    if template is not None and not isinstance(template, Mapping):
        check.fail("jobTemplate", f"must be an object, got {describe(template)}")
    job = check.spec.get("job")
    if job is None:
        return
    if not isinstance(job, Mapping):
        check.fail("job", f"must be an object, got {describe(job)}", "job: {kind: report}")
        return
    check.unknown(job, {"kind", "args", "modules"}, "job.")
    kind = job.get("kind")
    if not isinstance(kind, str) or not names.JOB_KIND.match(kind):
        check.fail(
            "job.kind",
            f"{kind!r} is not a job kind name (lowercase letters, digits, '.', '_' or '-')",
            "kind: nightly-report",
        )
    args = job.get("args", {})
    if not isinstance(args, Mapping):
        check.fail("job.args", f"must be an object, got {describe(args)}", "args: {days: 7}")
    modules = job.get("modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(module, str) and names.DOTTED_NAME.match(module) for module in modules
    ):
        check.fail(
            "job.modules",
            f"must be a list of importable Python module names, got {modules!r}",
            "modules: [myapp.jobs]",
        )
