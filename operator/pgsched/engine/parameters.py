"""Parameters: named values a manual run or a backfill is given, for its workload.

A ScheduledJob declares them (``spec.parameters``)::

    parameters:
      - name: region
        default: eu-west-1
        pattern: '[a-z]{2}-[a-z]+-[0-9]'
        description: where the report is built

``pgsched run-now --param region=us-east-1`` (or the ``pgsched.dev/run-now-parameters``
annotation, a JSON object, beside ``pgsched.dev/run-now``) and ``pgsched backfill
--param`` give values; they are checked here against the declarations (which
``spec.parameters`` checked at apply) — an undeclared name, a value that does not match
its pattern, or one too long is refused with the field, the problem and an example, and
nothing is queued — and recorded on the run
(``job_runs.parameters``: the values given, not the defaults). At launch the workload's
main container gets ``PGSCHED_PARAM_<NAME>`` (the name upper-cased) for every declared
parameter that has a value, given or default; an SDK job kind also gets them as keyword
arguments (merged over ``spec.job.args``). Scheduled runs get the defaults.

Values are tenant input and treated as hostile: a bounded count and length, printable
text only (no newlines, no control characters), and they go nowhere but environment
variable *values* and the SDK's JSON arguments — never into a name, a command, SQL or a
label. The variable names are prefixed so that no parameter can set ``PATH``,
``LD_PRELOAD`` or pgsched's own variables. A pattern is an RE2 regular expression (the
dialect of Kubernetes' CRD ``pattern``) that must match the whole value. It is written by
the job's author and applied to values from whoever may patch the ScheduledJob, on shared
workers (a sync worker, the admission webhook), so it is matched by RE2 in process:
RE2 runs in time linear in the value and never backtracks, which is why it has no
backreferences or lookaround — ``spec.parameters`` refuses a pattern that uses them, or
whose program is too large (:func:`program_size`). :func:`matches` is the one place a
pattern meets a value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

import re2

from pgsched.db import queries
from pgsched.engine import pattern_examples
from pgsched.engine.models import Definition, Run

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

FIELD = "parameters"
MAX_VALUE = 1024
ENV_PREFIX = "PGSCHED_PARAM_"
# RE2 matches in time proportional to the value's length times the size of the pattern's
# program (its instructions; ``.{0,200}`` is 1,804 of them, ``[a-z]{2}-[a-z]+-[0-9]`` 11),
# so spec.parameters bounds all of a spec's patterns together: twenty values of MAX_VALUE
# characters then cost a few milliseconds at worst (tests/unit/test_parameter_patterns.py).
MAX_INSTRUCTIONS = 2000
SMALLER = (
    "use unbounded repetition where the length does not matter, '[a-z]+' rather than '[a-z]{1,200}'"
)
# RE2's options: no error lines on stderr (a refused pattern is the spec's problem, said
# in its message), no submatches (only whether the whole value matches), and 64 KiB per
# compiled pattern instead of 8 MiB — room for a program of MAX_INSTRUCTIONS — so that
# the cache of compiled patterns stays small and compiling a pattern with a huge program
# (``(?i)[\pL\pN]{1,10}``: 13,457 instructions, 12 ms) stops at the limit within a
# millisecond.
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.never_capture = True
_OPTIONS.max_mem = 64 << 10


@dataclass(frozen=True)
class Declared:
    name: str
    default: str | None = None
    pattern: str | None = None
    description: str | None = None

    @property
    def env_name(self) -> str:
        return ENV_PREFIX + self.name.upper()


@dataclass(frozen=True)
class Problem:
    """One refused value: ``name`` the parameter, ``message`` what is wrong with it."""

    name: str
    message: str


def declared(spec: Mapping[str, Any]) -> tuple[Declared, ...]:
    """The declarations of a stored (validated) spec."""
    return tuple(
        Declared(
            str(item["name"]),
            item.get("default"),
            item.get("pattern"),
            item.get("description"),
        )
        for item in spec.get(FIELD) or ()
    )


def check(declarations: Sequence[Declared], given: Mapping[str, Any]) -> list[Problem]:
    """Every problem with the values ``given`` (names to strings) for ``declarations``."""
    known = {item.name: item for item in declarations}
    problems: list[Problem] = []
    for name, value in given.items():
        entry = known.get(name)
        if entry is None:
            listed = ", ".join(known) if known else "none (the spec declares no parameters)"
            problems.append(
                Problem(_cut(str(name)), f"is not a declared parameter; declared: {listed}")
            )
        elif not isinstance(value, str):
            problems.append(Problem(name, f"must be a string, got {quoted(value)}"))
        elif len(value) > MAX_VALUE:
            problems.append(Problem(name, f"is {len(value)} characters long, at most {MAX_VALUE}"))
        elif not value.isprintable():
            problems.append(
                Problem(
                    name, f"{quoted(value)} has control characters (newlines, tabs): not allowed"
                )
            )
        elif entry.pattern is not None and not matches(entry.pattern, value):
            try:
                program_size(entry.pattern)
                message = f"{quoted(value)} does not match the pattern {quoted(entry.pattern)}"
            except ValueError as error:  # a pattern stored before patterns were RE2's
                message = str(error)
            problems.append(Problem(entry.name, message))
    return problems


def program_size(pattern: str) -> int:
    """The number of instructions of ``pattern``'s RE2 program; ValueError saying why RE2
    cannot use it (for ``spec.parameters[i].pattern``)."""
    try:
        return int(re2.compile(pattern, _OPTIONS).programsize)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        if reason.startswith("pattern too large"):
            raise ValueError(
                f"{quoted(pattern)} is too large for RE2: its program passes the"
                f" {_OPTIONS.max_mem >> 10} KiB a pattern may take (each counted repetition"
                f" copies what it repeats): {SMALLER}"
            ) from None
        raise ValueError(
            f"{quoted(pattern)} is not an RE2 pattern: {reason} (patterns are matched by RE2,"
            " the dialect of Kubernetes' CRD patterns, in linear time: no backreferences and"
            " no lookahead or lookbehind)"
        ) from None


def matches(pattern: str, value: str) -> bool:
    """Whether ``pattern`` matches the whole of ``value``: RE2, in process, in time linear
    in the value. A pattern RE2 cannot compile matches nothing (``spec.parameters``
    refuses it first: :func:`program_size`)."""
    try:
        return re2.compile(pattern, _OPTIONS).fullmatch(value) is not None
    except re2.error:
        return False


def example(declarations: Sequence[Declared]) -> dict[str, str]:
    """A right value for each declared parameter (its default, or one its pattern
    accepts), for messages."""
    return {item.name: example_value(item) for item in declarations[:2]} or {"name": "value"}


def example_value(item: Declared) -> str:
    """A value ``item`` accepts: its default, else one its pattern matches
    (``pattern_examples``), else a placeholder that says what it must match."""
    if item.pattern is None:
        return item.default or "value"
    if item.default is not None and matches(item.pattern, item.default):
        return item.default
    found = pattern_examples.example_for(item.pattern, matches)
    return found if found is not None else f"<a value matching {item.pattern}>"


def shown(values: Mapping[str, str] | None) -> str | None:
    """A run's values for a person (describe, the UI): ``region="us-east-1", day="3"``."""
    if not values:
        return None
    return ", ".join(f"{name}={quoted(value)}" for name, value in sorted(values.items()))


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``--param name=value`` flags as a mapping; ValueError naming the bad one."""
    values: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ValueError(
                f"--param {quoted(item)} is not name=value (example: --param region=eu)"
            )
        if name in values:
            raise ValueError(f"--param {name} is given twice")
        values[name] = value
    return values


def environment(
    declarations: Sequence[Declared], given: Mapping[str, str] | None
) -> dict[str, str]:
    """The values a run's workload gets: declared defaults, overridden by those given."""
    values = {item.name: item.default for item in declarations if item.default is not None}
    values.update(
        {
            name: value
            for name, value in (given or {}).items()
            if name in {item.name for item in declarations}
        }
    )
    return values


def given_to(conn: Connection, claimed: list[Run], owners: Mapping[UUID, Definition]) -> list[Run]:
    """The claimed runs with the values they were given (``Run.parameters``), read in one
    query for the runs queued by hand whose job declares parameters, and only then: a
    scheduled run has none, and the claim does not read them."""
    wanted = [
        run.id
        for run in claimed
        if run.trigger != "schedule"
        and run.definition_id in owners
        and owners[run.definition_id].spec.get(FIELD)
    ]
    if not wanted:
        return claimed
    rows = conn.execute(queries.get("run_parameters_of"), {"ids": wanted}).fetchall()
    found = {row["run_id"]: row["parameters"] for row in rows}
    return [replace(run, parameters=found[run.id]) if run.id in found else run for run in claimed]


def _cut(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "…"


def quoted(value: Any) -> str:
    """A value quoted in a message (JSON), cut at 80 characters."""
    return json.dumps(_cut(value) if isinstance(value, str) else value, ensure_ascii=False)
