"""The public SDK API without a database: registration rules, retry hints, argument checks."""

from __future__ import annotations

import re

import pytest

from pgsched import sdk
from pgsched.sdk import arguments


class Transient(Exception):
    pass


class Budget(Transient):
    pass


class DailyBudget(Budget):
    pass


def noop(ctx, **kwargs):
    return None


def registered(registry=None, name="kind", **options):
    registry = registry or sdk.Registry()
    registry.job(name, **options)(noop)
    return registry.get(name)


def test_deny_list_wins_over_allow_list_and_subclasses_match_both():
    kind = registered(retry_on=(Transient,), never_retry_on=(Budget,))
    assert kind.retry_hint(Transient("x")) == "retry"
    assert kind.retry_hint(Budget("x")) == "never"  # also a Transient: deny wins
    assert kind.retry_hint(DailyBudget("x")) == "never"
    assert kind.retry_hint(ValueError("x")) is None


def test_a_single_exception_class_is_accepted_for_a_list():
    assert registered(retry_on=TimeoutError).retry_hint(TimeoutError()) == "retry"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "Nightly Report"}, "job kind name 'Nightly Report' must be 1-63 lowercase"),
        ({"compensate": noop}, "compensate= is only called for mutating kinds"),
        (
            {"retry_on": ("TimeoutError",)},
            "retry_on must list exception classes, got 'TimeoutError'",
        ),
        ({"never_retry_on": (sdk.Cancelled,)}, "must not cover pgsched.sdk.Cancelled"),
        ({"retry_on": (BaseException,)}, "must not cover pgsched.sdk.Cancelled (BaseException)"),
        (
            {"retry_on": (Budget,), "never_retry_on": (Budget,)},
            "Budget is on both retry_on and never_retry_on",
        ),
    ],
    ids=["bad-name", "compensate-read-only", "not-a-class", "cancelled", "base", "both-lists"],
)
def test_wrong_declarations_are_refused_at_import_time(options, message):
    with pytest.raises(sdk.RegistrationError, match=re.escape(message)):
        registered(**options)


def test_a_kind_name_is_registered_once_per_image():
    registry = sdk.Registry()
    registry.job("report")(noop)

    def other(ctx):
        return None

    with pytest.raises(
        sdk.RegistrationError, match=r"'report' is registered twice: by .*noop and by .*other"
    ):
        registry.job("report")(other)


def test_the_job_function_takes_the_context_first_and_arguments_by_name():
    registry = sdk.Registry()
    with pytest.raises(sdk.RegistrationError, match="first positional parameter"):
        registry.job("a")(lambda *, days: None)
    with pytest.raises(sdk.RegistrationError, match="'days' is positional-only"):
        registry.job("b")(lambda ctx, days, /: None)


def test_decorator_returns_the_function_unchanged():
    registry = sdk.Registry()

    def report(ctx, *, days: int = 7):
        return days

    assert registry.job("report")(report) is report
    assert report(None, days=3) == 3


def test_unknown_kind_lists_the_registered_ones():
    registry = sdk.Registry()
    registry.job("b-kind")(noop)
    registry.job("a-kind")(noop)
    with pytest.raises(sdk.UnknownKind, match="registered kinds: a-kind, b-kind"):
        registry.get("c-kind")


def report(
    ctx,
    *,
    team: str,
    days: int = 7,
    ratio: float = 0.5,
    dry_run: bool = False,
    tags: list[str] | None = None,
    limits: dict[str, int] | None = None,
):
    return None


def check(args, function=report):
    registry = sdk.Registry()
    registry.job("report")(function)
    return arguments.check(registry.get("report"), args)


def problems(args, function=report):
    with pytest.raises(sdk.InvalidArguments) as raised:
        check(args, function)
    return raised.value.problems


def test_arguments_that_fit_the_signature_pass_through():
    args = {
        "team": "ops",
        "days": 3,
        "ratio": 1,
        "tags": ["a"],
        "limits": {"x": 1},
        "dry_run": True,
    }
    assert check(args) == args


def test_every_argument_problem_is_reported_at_once():
    assert problems(
        {"days": True, "ratio": "1", "tags": ["a", 2], "limits": {"x": "1"}, "x": 1}
    ) == [
        "'days' must be an integer, got true",
        "'ratio' must be a number, got string '1'",
        "'tags[1]' must be a string, got number 2",
        "'limits.x' must be an integer, got string '1'",
        "unknown argument 'x' (known: 'team', 'days', 'ratio', 'dry_run', 'tags', 'limits')",
        "missing required argument 'team'",
    ]


def test_the_message_shows_the_expected_signature_with_json_defaults():
    with pytest.raises(sdk.InvalidArguments) as raised:
        check({})
    assert str(raised.value).splitlines()[-1] == (
        "  expected: report(ctx, *, team: str, days: int = 7, ratio: float = 0.5,"
        " dry_run: bool = false, tags: list[str] | None = null,"
        " limits: dict[str, int] | None = null)"
    )


def test_a_function_taking_kwargs_accepts_any_argument_names():
    assert check({"anything": [1]}, noop) == {"anything": [1]}


def test_a_union_names_every_alternative():
    def job(ctx, *, when: int | str | None = None):
        return None

    assert problems({"when": [1]}, job) == [
        "'when' must be an integer or a string or null, got a list"
    ]


def test_unchecked_annotations_pass_any_value():
    class Window:
        pass

    def job(ctx, *, window: Window):
        return None

    assert check({"window": "7d"}, job) == {"window": "7d"}
