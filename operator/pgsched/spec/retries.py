"""``spec.retryPolicy`` read into the engine's :class:`~pgsched.engine.retry.RetryPolicy`.

The defaults are the engine's own (``RetryPolicy()``, ``Backoff()``), so the spec and the
retry decisions cannot disagree about them. Failure reasons are checked by shape only: the
exception class names of an SDK job are not known until it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pgsched import names
from pgsched.engine.retry import ANY_REASON, REASONS, Backoff, RetryPolicy
from pgsched.spec.checker import Checker, describe


def policy(check: Checker) -> RetryPolicy:
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
