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

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from pgsched import names, schedule
from pgsched.engine import definitions
from pgsched.engine.definitions import DefinitionSpec
from pgsched.engine.retry import ANY_REASON, REASONS, Backoff, RetryPolicy
from pgsched.schedule import budget, zones

MAX_INT32 = 2**31 - 1
VALIDATION_STEPS = budget.MAX_STEPS // 4


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str
    example: str | None = None

    def __str__(self) -> str:
        suffix = f" (example: {self.example})" if self.example else ""
        return f"spec.{self.path}: {self.message}{suffix}"


class SpecError(ValueError):
    """One or more invalid fields; ``str()`` lists them all, one per line."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(error) for error in errors))


_SCHEDULE_FIELDS = {"schedule": "cron", "rrule": "rrule", "runAt": "once"}
_ENGINE_FIELDS = {
    *_SCHEDULE_FIELDS,
    "timeZone",
    "dstPolicy",
    "suspend",
    "maxConcurrentRuns",
    "concurrencyPolicy",
    "startingDeadlineSeconds",
    "catchUp",
    "catchUpLimit",
    "activeDeadlineSeconds",
    "retryPolicy",
    "heartbeat",
    "cancelGraceSeconds",
    "failureSuspendThreshold",
}
_EXTRA_FIELDS = {
    "jobTemplate",
    "job",
    "successfulRunsHistoryLimit",
    "failedRunsHistoryLimit",
    "pool",
}


class _Checker:
    """Collects field errors while reading values out of the spec mapping."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.errors: list[FieldError] = []

    def fail(self, path: str, message: str, example: str | None = None) -> None:
        self.errors.append(FieldError(path, message, example))

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.spec.get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(name, f"must be an object, got {_describe(value)}")
            return {}
        return value

    def integer(
        self,
        source: Mapping[str, Any],
        key: str,
        *,
        path: str,
        default: int | None,
        minimum: int,
        example: str,
    ) -> int | None:
        value = source.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {_describe(value)}", example)
            return default
        if not minimum <= value <= MAX_INT32:
            self.fail(path, f"{value} is out of range {minimum}..{MAX_INT32}", example)
            return default
        return value

    def number(
        self,
        source: Mapping[str, Any],
        key: str,
        *,
        path: str,
        default: float,
        minimum: float,
        maximum: float,
        example: str,
    ) -> float:
        value = source.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            self.fail(path, f"must be a number, got {_describe(value)}", example)
            return default
        if not minimum <= value <= maximum:
            self.fail(path, f"{value} is out of range {minimum:g}..{maximum:g}", example)
            return default
        return float(value)

    def choice(
        self, source: Mapping[str, Any], key: str, *, path: str, options: tuple[str, ...]
    ) -> str:
        value = source.get(key)
        if value is None:
            return options[0]
        if value not in options:
            self.fail(
                path,
                f"{value!r} is not one of {', '.join(options)}",
                f"{key}: {options[-1]}",
            )
            return options[0]
        return cast(str, value)

    def boolean(self, key: str) -> bool:
        value = self.spec.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_describe(value)}", f"{key}: true")
            return False
        return value

    def unknown(self, source: Mapping[str, Any], known: set[str], prefix: str) -> None:
        for key in source:
            if key not in known:
                self.fail(
                    f"{prefix}{key}",
                    f"unknown field; known fields are {', '.join(sorted(known))}",
                )


def parse(
    spec: Mapping[str, Any], *, hash_seed: str = "", anchor: datetime, now: datetime
) -> DefinitionSpec:
    """Validate a ScheduledJob spec. Raises :class:`SpecError` listing every bad field.

    ``anchor`` is the resource's creation time (the RRULE's default DTSTART day) and
    ``now`` is where the next occurrence is looked for, within the budget; a rule with
    none ahead (all in the past) is accepted and simply never runs again.
    """
    if not isinstance(spec, Mapping):
        raise SpecError([FieldError("", f"the spec must be an object, got {_describe(spec)}")])
    check = _Checker(spec)
    check.unknown(spec, _ENGINE_FIELDS | _EXTRA_FIELDS, "")

    kind, text = _schedule_choice(check)
    zone = spec.get("timeZone", "UTC")
    if not isinstance(zone, str):
        check.fail("timeZone", f"must be a string, got {_describe(zone)}", "Europe/Sofia")
        zone = "UTC"
    else:
        try:
            zones.load_zone(zone)
        except schedule.ScheduleError as error:
            check.fail("timeZone", error.message, error.example)
            zone = "UTC"

    dst = check.section("dstPolicy")
    check.unknown(dst, {"gap", "repeat"}, "dstPolicy.")
    gap = check.choice(dst, "gap", path="dstPolicy.gap", options=("shift", "skip"))
    repeat = check.choice(dst, "repeat", path="dstPolicy.repeat", options=("first", "last", "both"))

    max_runs = check.integer(
        spec,
        "maxConcurrentRuns",
        path="maxConcurrentRuns",
        default=1,
        minimum=1,
        example="maxConcurrentRuns: 2",
    )
    policy = check.choice(
        spec, "concurrencyPolicy", path="concurrencyPolicy", options=("Queue", "Skip", "Replace")
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
        default=100,
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
        default=30,
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
    _extra_fields(check)

    if check.errors:
        raise SpecError(check.errors)
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
        extra={key: spec[key] for key in _EXTRA_FIELDS if key in spec},
    )
    field_name = next(name for name, value in _SCHEDULE_FIELDS.items() if value == kind)
    try:
        built = definitions.build_schedule(parsed, hash_seed=hash_seed, anchor=anchor)
    except schedule.ScheduleError as error:
        raise SpecError([FieldError(field_name, error.message, error.example)]) from None
    try:
        # A rule whose occurrences are all past is valid (it was yesterday, it stays so):
        # it is stored with no next run. The next occurrence must be found within a
        # quarter of the expansion budget, so an accepted schedule keeps headroom.
        built.next_after(now, limit=VALIDATION_STEPS)
    except schedule.ScheduleError as error:
        raise SpecError([FieldError(field_name, error.message, error.example)]) from None
    return parsed


def _schedule_choice(check: _Checker) -> tuple[schedule.ScheduleKind | None, str | None]:
    given = [name for name in _SCHEDULE_FIELDS if check.spec.get(name) is not None]
    if len(given) != 1:
        what = "none is set" if not given else f"{' and '.join(given)} are all set"
        check.fail(
            "schedule",
            f"exactly one of schedule, rrule or runAt must be set; {what}",
            "schedule: '0 8 * * *'",
        )
        return None, None
    name = given[0]
    text = check.spec[name]
    if not isinstance(text, str) or not text.strip():
        check.fail(name, f"must be a non-empty string, got {_describe(text)}", "'0 8 * * *'")
        return None, None
    return cast(schedule.ScheduleKind, _SCHEDULE_FIELDS[name]), text.strip()


def _retry_policy(check: _Checker) -> RetryPolicy:
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
            f"must be an object, got {_describe(backoff_section)}",
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
    check: _Checker, section: Mapping[str, Any], key: str, *, default: tuple[str, ...]
) -> tuple[str, ...]:
    path = f"retryPolicy.{key}"
    value = section.get(key)
    if value is None:
        return default
    example = f"{key}: [NonZeroExit, HeartbeatLost]"
    if not isinstance(value, list):
        check.fail(path, f"must be a list of failure reasons, got {_describe(value)}", example)
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


def _heartbeat(check: _Checker) -> tuple[int, int, int]:
    section = check.section("heartbeat")
    check.unknown(
        section, {"intervalSeconds", "timeoutSeconds", "orphanTimeoutSeconds"}, "heartbeat."
    )
    interval = check.integer(
        section,
        "intervalSeconds",
        path="heartbeat.intervalSeconds",
        default=10,
        minimum=1,
        example="intervalSeconds: 10",
    )
    interval = interval or 10
    timeout = check.integer(
        section,
        "timeoutSeconds",
        path="heartbeat.timeoutSeconds",
        default=max(60, 3 * interval),
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
        default=max(300, timeout),
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


def _extra_fields(check: _Checker) -> None:
    for key in ("successfulRunsHistoryLimit", "failedRunsHistoryLimit"):
        check.integer(check.spec, key, path=key, default=None, minimum=0, example=f"{key}: 3")
    pool = check.spec.get("pool")
    if pool is not None and not (isinstance(pool, str) and names.OBJECT_NAME.match(pool)):
        check.fail(
            "pool",
            f"{pool!r} is not a ConcurrencyPool name (lowercase letters, digits, '-' or '.')",
            "pool: warehouse",
        )
    template = check.spec.get("jobTemplate")
    if template is not None and not isinstance(template, Mapping):
        check.fail("jobTemplate", f"must be an object, got {_describe(template)}")
    job = check.spec.get("job")
    if job is None:
        return
    if not isinstance(job, Mapping):
        check.fail("job", f"must be an object, got {_describe(job)}", "job: {kind: report}")
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
        check.fail("job.args", f"must be an object, got {_describe(args)}", "args: {days: 7}")
    modules = job.get("modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(module, str) and names.DOTTED_NAME.match(module) for module in modules
    ):
        check.fail(
            "job.modules",
            f"must be a list of importable Python module names, got {modules!r}",
            "modules: [myapp.jobs]",
        )


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else type(value).__name__
