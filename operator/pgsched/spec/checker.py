"""The one reader of spec values that every check goes through.

A bad value becomes a problem collected under its field's path (``spec.<path>``), never an
exception, so that one bad field does not hide the next: ``parse`` reports them all at once,
each worded the same way whichever section it is in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from pgsched import schedule
from pgsched.schedule import zones
from pgsched.validation import Problems

MAX_INT32 = 2**31 - 1


class Checker:
    """Reads values out of the spec mapping, collecting a problem per bad field."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.problems = Problems()

    def fail(self, path: str, message: str, example: str | None = None) -> None:
        self.problems.add(f"spec.{path}" if path else "spec", message, example)

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.spec.get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(name, f"must be an object, got {describe(value)}")
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
            self.fail(path, f"must be an integer, got {describe(value)}", example)
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
            self.fail(path, f"must be a number, got {describe(value)}", example)
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
            self.fail(key, f"must be true or false, got {describe(value)}", f"{key}: true")
            return False
        return value

    def zone(self, value: Any, *, path: str) -> bool:
        """Whether ``value`` is an IANA time zone name (else a problem at ``path``)."""
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {describe(value)}", "Europe/Sofia")
            return False
        try:
            zones.load_zone(value)
        except schedule.ScheduleError as error:
            self.fail(path, error.message, error.example)
            return False
        return True

    def unknown(self, source: Mapping[str, Any], known: set[str], prefix: str) -> None:
        for key in source:
            if key not in known:
                self.fail(
                    f"{prefix}{key}",
                    f"unknown field; known fields are {', '.join(sorted(known))}",
                )


def describe(value: Any) -> str:
    """How a message names a value of the wrong kind: its JSON type, and a scalar's value."""
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
