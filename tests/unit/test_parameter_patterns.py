"""spec.parameters[].pattern: RE2 semantics, matched in process, in time linear in the value.

A pattern is the job author's and a value whoever may patch the ScheduledJob, and both are
read on shared workers (a sync worker, the admission webhook): no pattern may cost more than
a few milliseconds there. Timings take the fastest of several tries, so a busy machine
slows a try without failing the test.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from pgsched import spec
from pgsched.engine import parameters
from pgsched.spec import parameters as declarations

NOW = datetime(2026, 6, 1, tzinfo=UTC)
HOSTILE = "(a+)+b"


def fastest(work: Callable[[], Any], *, tries: int) -> float:
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def hostile_declarations() -> list[parameters.Declared]:
    return [
        parameters.Declared(f"p{index}", pattern=HOSTILE)
        for index in range(declarations.MAX_PARAMETERS)
    ]


def hostile_values(length: int) -> dict[str, str]:
    return {f"p{index}": "a" * (length - 1) + "!" for index in range(declarations.MAX_PARAMETERS)}


def parse_hostile_spec(pattern: str, default: str) -> None:
    declared = [
        {"name": f"p{index}", "pattern": pattern, "default": default}
        for index in range(declarations.MAX_PARAMETERS)
    ]
    errors = refusals(declared)
    assert len(errors) == declarations.MAX_PARAMETERS


def refusals(declared: list[dict[str, object]]) -> list[spec.FieldError]:
    """The errors of a spec declaring ``declared`` (it must be refused)."""
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(
            {"schedule": "0 3 * * *", "parameters": declared},
            hash_seed="ns/job",
            anchor=NOW,
            now=NOW,
        )
    return refused.value.errors


@pytest.mark.parametrize(
    ("pattern", "default"),
    [
        # Exponential for a backtracking matcher, on a value that almost matches.
        (HOSTILE, "a" * (parameters.MAX_VALUE - 1) + "!"),
        # Linear for RE2, but each character walks a program of thousands of instructions.
        ("(a|aa|aaa|aaaa){1000}", "a" * (parameters.MAX_VALUE - 1) + "!"),
        ("(?:x*y*z*){200}a", "xyz" * (parameters.MAX_VALUE // 3)),
        # The largest program within the budget: one is matched, nineteen are refused.
        ("(a|aa|aaa|aaaa){280}", "a" * (parameters.MAX_VALUE - 1) + "!"),
        # Programs too large to compile at all.
        (r"\pL{1000}", "a"),
        (r"(?i)[\pL\pN ]{1,10}", "a"),
    ],
)
def test_a_hostile_pattern_set_parses_within_50_ms(pattern, default):
    """Twenty of one hostile pattern, with defaults of up to 1,024 characters."""
    assert fastest(partial(parse_hostile_spec, pattern, default), tries=5) <= 0.050


def test_patterns_past_the_instruction_budget_are_refused_naming_the_field():
    declared = [
        {"name": "day", "pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}"},
        {"name": "note", "pattern": ".{0,200}"},
        {"name": "other", "pattern": ".{0,200}"},
    ]
    [error] = refusals(declared)
    assert error.path == "spec.parameters[2].pattern"
    assert error.message.startswith(
        '".{0,200}" compiles to 1804 RE2 instructions, which brings the spec\'s patterns to'
    )
    assert f"more than {parameters.MAX_INSTRUCTIONS}" in error.message
    assert "'[a-z]+' rather than '[a-z]{1,200}'" in error.message


def test_matching_time_grows_linearly_with_the_value():
    """Each fourfold longer value costs at most about four times as much (twice that, for
    a noisy machine) — never the doubling per character of a backtracking matcher."""
    declared = hostile_declarations()
    times = {
        length: fastest(partial(parameters.check, declared, hostile_values(length)), tries=20)
        for length in (16, 64, 256, 1024)
    }
    for length in (16, 64, 256):
        assert times[length * 4] <= 8 * times[length], times


def test_matching_starts_no_child_process(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a pattern was matched in a child process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    declared = [parameters.Declared("region", pattern="[a-z]{2}-[a-z]+-[0-9]")]
    assert parameters.check(declared, {"region": "eu-west-1"}) == []
    assert [problem.name for problem in parameters.check(declared, {"region": "Mars"})] == [
        "region"
    ]


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (r"(a)\1", r"invalid escape sequence: \1"),
        ("(?=a)a", "invalid perl operator: (?="),
        ("(?<!x)a", "invalid perl operator: (?<!"),
    ],
)
def test_a_pattern_re2_cannot_compile_is_refused_naming_the_field(pattern, problem):
    [error] = refusals([{"name": "a", "pattern": pattern}])
    assert error.path == "spec.parameters[0].pattern"
    assert error.message.startswith(f"{json.dumps(pattern)} is not an RE2 pattern")
    assert problem in error.message
    assert "no backreferences and no lookahead or lookbehind" in error.message
    assert error.example == declarations.EXAMPLE


@pytest.mark.parametrize("pattern", [r"\pL{1000}", r"(?i)[\pL\pN ]{1,10}"])
def test_a_pattern_too_large_for_re2_is_refused_saying_so_not_as_syntax(pattern):
    [error] = refusals([{"name": "a", "pattern": pattern}])
    assert error.path == "spec.parameters[0].pattern"
    assert error.message == (
        f"{json.dumps(pattern)} is too large for RE2: its program passes the 64 KiB a pattern"
        " may take (each counted repetition copies what it repeats): use unbounded repetition"
        " where the length does not matter, '[a-z]+' rather than '[a-z]{1,200}'"
    )
    assert error.example == declarations.EXAMPLE


def test_re2_syntax_that_python_lacks_is_accepted():
    """RE2 is also the dialect of Kubernetes' CRD patterns: what a CRD accepts, we accept."""
    declared = [parameters.Declared("day", pattern=r"[[:digit:]]{4}-\pN{2}")]
    assert parameters.check(declared, {"day": "2027-03"}) == []
