"""The one error type of the schedule layer: what is wrong, and a valid example."""

from __future__ import annotations


class ScheduleError(ValueError):
    """An expression, time zone or one-shot time that cannot be used.

    ``message`` says what is wrong with the value; ``example`` shows a valid one. The spec
    validator prefixes the field name (``spec.schedule: …``).
    """

    def __init__(self, message: str, *, example: str) -> None:
        super().__init__(f"{message} (example: {example})")
        self.message = message
        self.example = example
