"""``spec.parameters``: the named values a manual run or a backfill may be given.

The declarations are checked at apply, each problem at its own path
(``spec.parameters[1].pattern``): a name that cannot become an environment variable, a
name declared twice (names ignore case, as the variables do), a pattern that does not
compile, and a default its own pattern refuses, so that no run-now or backfill finds out
later. The values a run is given are checked against these declarations when it is
queued, by ``engine.parameters.check`` (which this module also calls for each default):
that is a run-time check, below this layer, for the CLI and the operator alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pgsched.engine import parameters
from pgsched.spec.checker import Checker

MAX_PARAMETERS = 20
MAX_NAME = 63
MAX_PATTERN = 256
MAX_DESCRIPTION = 1024
NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME - 1}}}")
EXAMPLE = "parameters: [{name: region, default: eu-west-1, pattern: '[a-z]{2}-[a-z]+-[0-9]'}]"
_FIELD = parameters.FIELD


def validate(check: Checker) -> None:
    value = check.spec.get(_FIELD)
    if value is None:
        return
    if not isinstance(value, list):
        check.fail(_FIELD, "must be a list of {name, default, pattern, description}", EXAMPLE)
        return
    if len(value) > MAX_PARAMETERS:
        check.fail(_FIELD, f"declares {len(value)} parameters, at most {MAX_PARAMETERS}", EXAMPLE)
        return
    seen: set[str] = set()
    spent = 0  # RE2 instructions of the patterns so far (engine.parameters.MAX_INSTRUCTIONS)
    for index, item in enumerate(value):
        path = f"{_FIELD}[{index}]"
        if not isinstance(item, Mapping):
            check.fail(path, "must be an object {name, default, pattern, description}", EXAMPLE)
            continue
        unknown = sorted(set(item) - {"name", "default", "pattern", "description"})
        if unknown:
            check.fail(
                f"{path}.{unknown[0]}",
                "unknown field; known fields are default, description, name, pattern",
                EXAMPLE,
            )
        name = item.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            check.fail(
                f"{path}.name",
                f"{name!r} is not a parameter name: a letter or '_', then letters, digits or"
                f" '_', at most {MAX_NAME} characters (it becomes {parameters.ENV_PREFIX}<NAME>)",
                EXAMPLE,
            )
            continue
        if name.upper() in seen:
            check.fail(f"{path}.name", f"{name!r} is declared twice (names ignore case)", EXAMPLE)
            continue
        seen.add(name.upper())
        texts: dict[str, str | None] = {}
        for key, limit in (
            ("default", parameters.MAX_VALUE),
            ("pattern", MAX_PATTERN),
            ("description", MAX_DESCRIPTION),
        ):
            text = item.get(key)
            if text is not None and (not isinstance(text, str) or len(text) > limit):
                check.fail(
                    f"{path}.{key}",
                    f"must be a string of at most {limit} characters,"
                    f" got {parameters.quoted(text)}",
                    EXAMPLE,
                )
                text = None
            texts[key] = text
        pattern = texts["pattern"]
        if pattern is not None:
            try:
                size = parameters.program_size(pattern)
            except ValueError as error:
                check.fail(f"{path}.pattern", str(error), EXAMPLE)
                pattern = None
            else:
                spent += size
                if spent > parameters.MAX_INSTRUCTIONS:
                    check.fail(f"{path}.pattern", _too_large(pattern, size, spent), EXAMPLE)
                    pattern = None
        default = texts["default"]
        if default is not None:
            entry = parameters.Declared(name, default, pattern)
            for problem in parameters.check([entry], {name: default}):
                check.fail(f"{path}.default", problem.message, EXAMPLE)


def _too_large(pattern: str, size: int, spent: int) -> str:
    return (
        f"{parameters.quoted(pattern)} compiles to {size} RE2 instructions, which brings the"
        f" spec's patterns to {spent}, more than {parameters.MAX_INSTRUCTIONS} (matching costs"
        f" time per character for each instruction): {parameters.SMALLER}"
    )
