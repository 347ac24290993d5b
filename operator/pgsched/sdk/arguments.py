"""Checking a run's arguments against the job function's signature, before the job starts.

Arguments come from ``spec.job.args`` as a JSON object and are passed to the job function
as keyword arguments. The signature *is* the schema: unknown names, missing required
parameters and values of the wrong JSON type for a simple annotation (``int``, ``float``,
``str``, ``bool``, ``list[...]``, ``dict[str, ...]``, ``X | None``) are all reported at
once, with the expected signature, and the run fails fast instead of crashing half-way
through a batch. Annotations beyond those are not checked (the function gets the value
as decoded from JSON).
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pgsched.sdk.kinds import JobKind

_EMPTY = inspect.Parameter.empty
_SIMPLE: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    bool: ("true or false", lambda value: isinstance(value, bool)),
    int: ("an integer", lambda value: isinstance(value, int) and not isinstance(value, bool)),
    float: (
        "a number",
        lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    ),
    str: ("a string", lambda value: isinstance(value, str)),
    list: ("a list", lambda value: isinstance(value, list)),
    dict: ("an object", lambda value: isinstance(value, dict)),
    type(None): ("null", lambda value: value is None),
}


class InvalidArguments(ValueError):
    """The arguments do not fit the kind's signature; ``str()`` lists every problem."""

    def __init__(self, kind: JobKind, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(
            f"invalid arguments for job kind {kind.name!r} (spec.job.args / PGSCHED_JOB_ARGS):\n"
            f"{lines}\n  expected: {describe_signature(kind)}"
        )


def check(kind: JobKind, args: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments to call the kind with; raises :class:`InvalidArguments`."""
    parameters = list(inspect.signature(kind.function).parameters.values())[1:]
    named = {
        parameter.name: parameter
        for parameter in parameters
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }
    open_ended = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
    hints = _type_hints(kind)
    problems = []
    for name, value in args.items():
        if name not in named:
            if not open_ended:
                known = ", ".join(repr(known) for known in named) or "none"
                problems.append(f"unknown argument {name!r} (known: {known})")
            continue
        complaint = _problem(hints[name], value, name) if name in hints else None
        if complaint is not None:
            problems.append(complaint)
    for name, parameter in named.items():
        if parameter.default is _EMPTY and name not in args:
            problems.append(f"missing required argument {name!r}")
    if problems:
        raise InvalidArguments(kind, problems)
    return dict(args)


def describe_signature(kind: JobKind) -> str:
    """``name(ctx, *, total: int, batch_size: int = 100)``: types resolved, defaults as JSON."""
    hints = _type_hints(kind)
    parameters = list(inspect.signature(kind.function).parameters.values())
    parts = [parameters[0].name]
    star = False
    for parameter in parameters[1:]:
        if parameter.kind is parameter.VAR_POSITIONAL:
            parts.append(f"*{parameter.name}")
            star = True
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = parameter.name
        annotation = hints.get(parameter.name, parameter.annotation)
        if annotation is not _EMPTY:
            text += f": {_type_name(annotation)}"
        if parameter.default is not _EMPTY:
            text += f" = {_default(parameter.default)}"
        parts.append(text)
    return f"{kind.function.__name__}({', '.join(parts)})"


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _type_hints(kind: JobKind) -> dict[str, Any]:
    try:
        return typing.get_type_hints(kind.function)
    except Exception:  # an annotation that does not resolve: check names, not types
        return {}


def _problem(annotation: Any, value: Any, path: str) -> str | None:
    """None if ``value`` fits ``annotation`` (or the annotation is not one we check),
    otherwise the complaint, naming the offending place (``tags[1]``, ``limits.x``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        options = typing.get_args(annotation)
        complaints = [_problem(option, value, path) for option in options]
        if any(complaint is None for complaint in complaints):
            return None
        for option, complaint in zip(options, complaints, strict=True):
            if _fits_outer(option, value):  # right container, wrong contents: say which
                return complaint
        expected = " or ".join(_SIMPLE[_base(option)][0] for option in options)
        return f"{path!r} must be {expected}, got {_json(value)}"
    base = _base(annotation)
    if base not in _SIMPLE:
        return None
    if not _fits_outer(annotation, value):
        return f"{path!r} must be {_SIMPLE[base][0]}, got {_json(value)}"
    item_args = typing.get_args(annotation)
    if base is list and item_args:
        for index, item in enumerate(value):
            complaint = _problem(item_args[0], item, f"{path}[{index}]")
            if complaint is not None:
                return complaint
    if base is dict and len(item_args) == 2:
        for key, item in value.items():
            complaint = _problem(item_args[1], item, f"{path}.{key}")
            if complaint is not None:
                return complaint
    return None


def _base(annotation: Any) -> Any:
    return typing.get_origin(annotation) or annotation


def _fits_outer(annotation: Any, value: Any) -> bool:
    checked = _SIMPLE.get(_base(annotation))
    return checked is None or checked[1](value)


def _json(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, int | float):
        return f"number {value}"
    return "a list" if isinstance(value, list) else "an object"
