"""One way to report invalid input: every problem, each with its field, what is wrong and
a right example.

The ScheduledJob spec (``spec``), the operator's settings (``k8s.serve.settings``), the tick's
(``engine.tick``) and the job pods' contract (``runner.settings``) are all validated the
same way: a ``Problems`` collector gathers a ``FieldError`` per problem while the input is
read, so a user fixes everything in one go instead of one error per attempt, and at the
end ``raise_if_any`` raises one ``ValidationError`` listing them, one per line::

    spec.timeZone: unknown time zone 'Europe/Sofiya'; use an IANA name (example: Europe/Sofia)
    PGSCHED_API_QPS: 'fast' is not a number (example: PGSCHED_API_QPS=20)

``SpecError`` (a ScheduledJob) and ``SettingsError`` (a program's configuration) are the
two kinds, so callers can tell a user's resource from an installation's mistake. On the
ground floor: every layer imports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """``path``: the field or variable (``spec.retryPolicy.limit``, ``PGSCHED_DSN``)."""

    path: str
    message: str
    example: str | None = None

    def __str__(self) -> str:
        suffix = f" (example: {self.example})" if self.example else ""
        return f"{self.path}: {self.message}{suffix}" if self.path else self.message + suffix


class ValidationError(ValueError):
    """One or more problems; ``str()`` lists them all, one per line, after ``title``."""

    def __init__(self, errors: list[FieldError], *, title: str = "") -> None:
        self.errors = errors
        lines = [str(error) for error in errors]
        super().__init__("\n  ".join([title, *lines]) if title else "\n".join(lines))


class SpecError(ValidationError):
    """A ScheduledJob spec is invalid."""


class SettingsError(ValidationError):
    """A program's settings (environment, flags) are invalid."""


class Problems:
    """Collects problems while input is read; ``raise_if_any`` reports them together."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, path: str, message: str, example: str | None = None) -> None:
        self.errors.append(FieldError(path, message, example))

    def extend(self, error: ValidationError) -> None:
        self.errors.extend(error.errors)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self, kind: type[ValidationError], *, title: str = "") -> None:
        if self.errors:
            raise kind(list(self.errors), title=title)
