"""``pgsched describe``'s lines as the Run API carries them: each kind read back as it was,
so a tenant's CLI prints times in the ScheduledJob's zone and durations in words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgsched.engine import run_description

LINES: list[tuple[str, run_description.Plain]] = [
    ("Run", 4711),
    ("Status", "FAILED"),
    ("Reason", None),
    ("Started", datetime(2026, 12, 7, 8, 0, 0, 123456, tzinfo=UTC)),
    ("Duration", timedelta(minutes=3, seconds=5.5)),
    ("Attempt", "2 (retried as run 4712)"),
    ("Exit code", 0),
]


def test_each_kind_of_line_is_read_back_as_it_was():
    shaped = run_description.lines_json(LINES)
    assert shaped[3] == {"name": "Started", "time": "2026-12-07T08:00:00.123456Z"}
    assert shaped[4] == {"name": "Duration", "seconds": 185.5}
    assert shaped[2] == {"name": "Reason"}
    assert run_description.lines_from_json(shaped) == LINES


def test_a_zero_is_a_value_not_a_missing_one():
    [line] = run_description.lines_json([("Exit code", 0)])
    assert line == {"name": "Exit code", "number": 0}
    assert run_description.lines_from_json([line]) == [("Exit code", 0)]
