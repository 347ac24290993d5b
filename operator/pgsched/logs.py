"""Logging for every pgsched process: text for people, JSON lines for log pipelines.

At 3 a.m. the question is "what happened to run 4711?", so every line about a run carries
the same three fields, ``run_id``, ``definition`` (``namespace/name``) and ``attempt``,
whatever component wrote it (dispatch, settle, the launcher, the Job watch, the
publisher). Code that logs about a run wraps its logger once::

    log_run = logs.for_run(log, run, definition)
    log_run.info("created Job %s", name)

In JSON format (``PGSCHED_LOG_FORMAT=json`` or ``--log-format json``) each record is one
object with ``timestamp`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the context
fields when present, and ``exception`` for tracebacks; a log pipeline can then select
``run_id = 4711`` across replicas. The text format appends the same fields in brackets.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any, Protocol

FORMATS = ("text", "json")
# The context fields, in the order they are printed.
FIELDS = ("run_id", "definition", "attempt")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# What for_run reads from a run and its definition (engine.models.Run and Definition):
# described here, not imported, because logging is on the ground floor.
class _Run(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def attempt(self) -> int: ...


class _Definition(Protocol):
    @property
    def key(self) -> str: ...


class JsonFormatter(logging.Formatter):
    """One JSON object per line; context fields only when the record has them."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """The classic one-line format, with the context fields appended in brackets."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(
            f"{name}={getattr(record, name)}"
            for name in FIELDS
            if getattr(record, name, None) is not None
        )
        if not context:
            return line
        first, newline, rest = line.partition("\n")  # keep tracebacks below the context
        return f"{first} [{context}]{newline}{rest}"


def setup(level: str = "INFO", log_format: str = "text") -> None:
    """Configure the root logger for a pgsched process (stderr, one handler)."""
    if log_format not in FORMATS:
        raise ValueError(
            f"log format {log_format!r} is not one of {', '.join(FORMATS)} "
            "(example: PGSCHED_LOG_FORMAT=json)"
        )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


class ContextAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds fixed context fields to every record, keeping fields a call passes itself."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def context(
    *, run_id: int | str | None, definition: str | None, attempt: int | str | None
) -> Mapping[str, Any]:
    """The context fields as ``extra`` for one call; values from labels are normalized."""
    return {
        "run_id": _integer(run_id),
        "definition": definition,
        "attempt": _integer(attempt),
    }


def for_run(logger: logging.Logger, run: _Run, definition: _Definition | None) -> ContextAdapter:
    """A logger whose records are about ``run`` (of ``definition``, when known)."""
    return ContextAdapter(
        logger,
        context(
            run_id=run.id,
            definition=definition.key if definition is not None else None,
            attempt=run.attempt,
        ),
    )


def for_labels(
    logger: logging.Logger,
    *,
    run_id: int | str | None,
    namespace: str | None,
    name: str | None,
    attempt: int | str | None,
) -> ContextAdapter:
    """A run logger built from what a Job's labels say (no database read needed)."""
    definition = f"{namespace}/{name}" if namespace and name else None
    return ContextAdapter(logger, context(run_id=run_id, definition=definition, attempt=attempt))


def _integer(value: int | str | None) -> int | str | None:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value
