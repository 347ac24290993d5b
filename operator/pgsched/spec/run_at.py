"""The refusal of a ``runAt`` already past.

A one-shot whose instant has gone by would run the moment it is applied, which is most
often a wrong date: a new one is refused unless ``runAtInPast: Run`` says it is meant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.schedule import timeline
from pgsched.validation import FieldError, SpecError

# A runAt this much before "now" is still taken as meant (an apply that took a while).
RUN_AT_SLACK = timedelta(seconds=60)


def reject_past(built: timeline.Stream, text: str, not_before: datetime) -> None:
    first = built.next_after(datetime(1970, 1, 1, tzinfo=UTC))
    if first is None or first.at >= not_before - RUN_AT_SLACK:
        return
    late = not_before - first.at
    ahead = (not_before + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise SpecError(
        [
            FieldError(
                "spec.runAt",
                f"{text!r} is {_how_long(late)} in the past (now"
                f" {not_before:%Y-%m-%dT%H:%M:%SZ}), so it would run at once; fix the date,"
                " or set runAtInPast: Run to run it now on purpose",
                f"runAt: '{ahead}'",
            )
        ]
    )


def _how_long(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"
