"""Which schedule a spec names, and which of its fields a schedule's refusal belongs to.

A spec names its schedule in exactly one of schedule, rrule, runAt or schedules (or, when
chained with spec.after, none). The schedule package's errors know nothing of fields: this
is where a refusal gets the path the user wrote (``spec.rrule``, ``spec.schedules[1].rrule``),
so that the message points at the line to fix.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import cast

from pgsched import schedule
from pgsched.engine import definitions
from pgsched.engine.definitions import DefinitionSpec
from pgsched.schedule import budget, union
from pgsched.spec import fields
from pgsched.spec.checker import Checker, describe
from pgsched.validation import FieldError, SpecError

# How far validation looks for a next occurrence: a quarter of the budget (parse says why).
VALIDATION_STEPS = budget.MAX_STEPS // 4


def choice(check: Checker, *, chained: bool) -> tuple[schedule.ScheduleKind | None, str | None]:
    given = [
        name for name in (*fields.SCHEDULE_FIELDS, "schedules") if check.spec.get(name) is not None
    ]
    if not given and chained:
        return "none", ""  # runs only after its upstreams (or by hand)
    if len(given) != 1:
        what = "none is set" if not given else f"{' and '.join(given)} are all set"
        check.fail(
            "schedule",
            f"exactly one of schedule, rrule, runAt or schedules must be set (or none, with"
            f" spec.after); {what}",
            "schedule: '0 8 * * *'",
        )
        return None, None
    name = given[0]
    if name == "schedules":
        return _schedules(check)
    text = check.spec[name]
    if not isinstance(text, str) or not text.strip():
        check.fail(name, f"must be a non-empty string, got {describe(text)}", "'0 8 * * *'")
        return None, None
    return cast(schedule.ScheduleKind, fields.SCHEDULE_FIELDS[name]), text.strip()


_ENTRY_EXAMPLE = "schedules: [{schedule: '30 8 * * 1-5'}, {schedule: '0 10 * * 6'}]"


def _schedules(check: Checker) -> tuple[schedule.ScheduleKind | None, str | None]:
    """``spec.schedules``: each entry a cron (``schedule``) or an ``rrule``, with an
    optional ``timeZone`` of its own; stored as one ``union`` schedule."""
    value = check.spec["schedules"]
    if not isinstance(value, list) or not 1 <= len(value) <= union.MAX_ENTRIES:
        check.fail(
            "schedules",
            f"must be a list of 1..{union.MAX_ENTRIES} entries, got {describe(value)}"
            + (f" of {len(value)}" if isinstance(value, list) else ""),
            _ENTRY_EXAMPLE,
        )
        return None, None
    entries: list[tuple[schedule.ScheduleKind, str, str | None]] = []
    for index, item in enumerate(value):
        path = f"schedules[{index}]"
        if not isinstance(item, Mapping):
            check.fail(path, f"must be an object, got {describe(item)}", _ENTRY_EXAMPLE)
            continue
        check.unknown(item, {"schedule", "rrule", "timeZone"}, f"{path}.")
        kinds = [name for name in ("schedule", "rrule") if item.get(name) is not None]
        if len(kinds) != 1:
            check.fail(
                path, "must set exactly one of schedule or rrule", "{schedule: '0 10 * * 6'}"
            )
            continue
        text = item[kinds[0]]
        if not isinstance(text, str) or not text.strip():
            check.fail(f"{path}.{kinds[0]}", f"must be a non-empty string, got {describe(text)}")
            continue
        zone = item.get("timeZone")
        if zone is not None and not check.zone(zone, path=f"{path}.timeZone"):
            continue
        kind = cast(schedule.ScheduleKind, fields.SCHEDULE_FIELDS[kinds[0]])
        entries.append((kind, text.strip(), zone))
    if len(entries) != len(value):
        return None, None
    return "union", schedule.union_text(entries)


def field_error(
    parsed: DefinitionSpec,
    error: schedule.ScheduleError,
    *,
    hash_seed: str,
    anchor: datetime,
    now: datetime,
    searched: bool = False,
) -> SpecError:
    """The field a schedule error belongs to: the single-entry field, or the entry of
    ``spec.schedules`` that fails on its own (else the list as a whole). ``searched``: the
    error came from looking for the next occurrence from ``now``, which the message says."""

    def said(message: str) -> str:
        if not searched:
            return message
        return (
            f"{message} (searched from {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}, when"
            " it was applied: applied at another time it may be found in reach)"
        )

    kind = parsed.schedule_kind
    if kind != "union":
        field_name = next(name for name, value in fields.SCHEDULE_FIELDS.items() if value == kind)
        return SpecError([FieldError(f"spec.{field_name}", said(error.message), error.example)])
    entries = json.loads(parsed.schedule)
    for index, entry in enumerate(entries):
        single = dataclasses.replace(
            parsed,
            schedule_kind=entry["kind"],
            schedule=entry["text"],
            time_zone=entry.get("timeZone", parsed.time_zone),
        )
        try:
            definitions.build_schedule(single, hash_seed=hash_seed, anchor=anchor).next_after(
                now, limit=VALIDATION_STEPS // len(entries)
            )
        except schedule.ScheduleError as own:
            field_name = "schedule" if entry["kind"] == "cron" else "rrule"
            return SpecError(
                [
                    FieldError(
                        f"spec.schedules[{index}].{field_name}", said(own.message), own.example
                    )
                ]
            )
    return SpecError([FieldError("spec.schedules", said(error.message), error.example)])
