"""Job kinds: named Python functions the runner can execute, and the registry that finds them.

A ScheduledJob names a kind (``spec.job.kind``); the image provides the code. The decorator
records, next to the function, the three things the runner needs to know beyond "call it":

- whether it is *mutating* (writes somewhere) and, if so, how to *compensate* a run that
  was cancelled half-way — read-only kinds have nothing to undo, so a compensation hook on
  one is refused rather than silently never called;
- which exceptions are worth retrying (``retry_on``) and which must never be
  (``never_retry_on``). Matching is ``isinstance``: subclasses match. The deny list is
  checked first and always wins, so ``never_retry_on=(BudgetExhausted,)`` holds even when
  ``BudgetExhausted`` is a subclass of something on ``retry_on``.

Registration problems are programming errors in the job module; they raise
:class:`RegistrationError` at import time, where the traceback points at the decorator.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pgsched import names
from pgsched.sdk.context import Cancelled, JobContext

JobFunction = Callable[..., object]
Compensation = Callable[[JobContext, Cancelled], object]
RetryHint = Literal["retry", "never"]
ExceptionTypes = tuple[type[BaseException], ...]

F = TypeVar("F", bound=JobFunction)


class RegistrationError(ValueError):
    """A job kind was declared wrongly (bad name, bad exception list, duplicate, ...)."""


class UnknownKind(LookupError):
    """No kind of that name is registered."""


@dataclass(frozen=True)
class JobKind:
    name: str
    function: JobFunction
    mutating: bool
    retry_on: ExceptionTypes
    never_retry_on: ExceptionTypes
    compensate: Compensation | None

    @property
    def origin(self) -> str:
        return f"{self.function.__module__}.{self.function.__qualname__}"

    def retry_hint(self, error: BaseException) -> RetryHint | None:
        """``never`` if the deny list matches (checked first, wins), ``retry`` if the allow
        list does, None if neither (the definition's ``retryOn`` then decides)."""
        if isinstance(error, self.never_retry_on):
            return "never"
        if isinstance(error, self.retry_on):
            return "retry"
        return None


class Registry:
    """Job kinds by name. The module-level :data:`registry` is the one ``pgsched run`` uses."""

    def __init__(self) -> None:
        self._kinds: dict[str, JobKind] = {}

    def job(
        self,
        name: str,
        *,
        mutating: bool = False,
        retry_on: Iterable[type[BaseException]] = (),
        never_retry_on: Iterable[type[BaseException]] = (),
        compensate: Compensation | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as job kind ``name``; the function is returned
        unchanged, so it stays directly callable in the user's own tests."""
        if not isinstance(name, str) or not names.JOB_KIND.match(name):
            raise RegistrationError(
                f"job kind name {name!r} must be 1-63 lowercase letters, digits, '.', '_' or"
                " '-', starting and ending with a letter or digit (example: nightly-report)"
            )
        allow = _exception_types(name, "retry_on", retry_on)
        deny = _exception_types(name, "never_retry_on", never_retry_on)
        both = [kind.__name__ for kind in allow if kind in deny]
        if both:
            raise RegistrationError(
                f"job kind {name!r}: {', '.join(both)} is on both retry_on and never_retry_on;"
                " list it once (never_retry_on would win anyway)"
            )
        if compensate is not None and not mutating:
            raise RegistrationError(
                f"job kind {name!r}: compensate= is only called for mutating kinds; declare"
                " the kind mutating=True or drop the hook"
            )
        if compensate is not None and not callable(compensate):
            raise RegistrationError(
                f"job kind {name!r}: compensate must be a function (ctx, cancelled) -> None,"
                f" got {compensate!r}"
            )

        def register(function: F) -> F:
            _check_signature(name, function)
            kind = JobKind(name, function, mutating, allow, deny, compensate)
            existing = self._kinds.get(name)
            if existing is not None and existing.function is not function:
                raise RegistrationError(
                    f"job kind {name!r} is registered twice: by {existing.origin} and by"
                    f" {kind.origin}; kind names must be unique in the image"
                )
            self._kinds[name] = kind
            return function

        return register

    def get(self, name: str) -> JobKind:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(sorted(self._kinds)) or "none"
            raise UnknownKind(
                f"job kind {name!r} is not registered; registered kinds: {known}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._kinds)


def _exception_types(name: str, field: str, types: Iterable[Any]) -> ExceptionTypes:
    if isinstance(types, type):  # retry_on=TimeoutError instead of (TimeoutError,)
        types = (types,)
    found = tuple(types)
    for item in found:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise RegistrationError(
                f"job kind {name!r}: {field} must list exception classes, got {item!r}"
                f" (example: {field}=(TimeoutError, ConnectionError))"
            )
        if issubclass(item, Cancelled) or issubclass(Cancelled, item):
            raise RegistrationError(
                f"job kind {name!r}: {field} must not cover pgsched.sdk.Cancelled"
                f" ({item.__name__}); a cancelled run ends CANCELLED and is never retried"
            )
    return found


def _check_signature(name: str, function: JobFunction) -> None:
    if not callable(function):
        raise RegistrationError(f"job kind {name!r}: {function!r} is not a function")
    parameters = list(inspect.signature(function).parameters.values())
    first_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in first_kinds:
        raise RegistrationError(
            f"job kind {name!r}: {function.__qualname__} must take the job context as its"
            " first positional parameter (example: def report(ctx, *, days: int = 7): ...)"
        )
    for parameter in parameters[1:]:
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise RegistrationError(
                f"job kind {name!r}: parameter {parameter.name!r} is positional-only, but job"
                " arguments are passed by name (make it keyword-only: def job(ctx, *, ...))"
            )


registry = Registry()
job = registry.job
