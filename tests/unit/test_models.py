"""Rows become the same frozen objects however they are built."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from pgsched.engine.models import Definition, Run

AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def run_row(**extra):
    row = {field.name: None for field in dataclasses.fields(Run)}
    row.update(id=7, definition_id=uuid.uuid4(), status="RUNNING", trigger="schedule")
    row.update(scheduled_for=AT, attempt=1, cancel_requested=False)
    return {**row, **extra}


def test_a_full_row_builds_the_object_its_constructor_builds():
    row = run_row(outcome="claimed", definition_version=3)  # columns Run does not declare
    built = Run.from_row(row)
    assert built == Run(**{f.name: row[f.name] for f in dataclasses.fields(Run)})
    assert not hasattr(built, "outcome")
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.status = "QUEUED"  # type: ignore[misc]


def test_a_row_without_a_column_that_has_a_default_gets_the_default():
    row = {field.name: None for field in dataclasses.fields(Definition)}
    row.update(id=uuid.uuid4(), name="job", namespace="default", spec={})
    del row["version"], row["after_mode"]  # as a reader of an older schema sees it
    built = Definition.from_row(row)
    assert (built.version, built.after_mode) == (1, "Any")


def test_a_row_without_a_required_column_is_refused():
    row = run_row()
    del row["status"]
    with pytest.raises(TypeError, match="status"):
        Run.from_row(row)


def test_a_tuple_row_builds_the_object_its_dict_row_builds():
    """What the dispatcher reads its claimed runs with: the same object, from a tuple."""
    row = run_row(outcome="claimed", definition_version=3)
    built = Run.reader(list(row))(tuple(row.values()))
    assert built == Run.from_row(row)
    assert not hasattr(built, "outcome")


def test_a_tuple_row_without_a_column_that_has_a_default_gets_the_default():
    row = run_row()
    del row["workload_ended_at"]  # as a reader of an older schema sees it
    built = Run.reader(list(row))(tuple(row.values()))
    assert built.workload_ended_at is None and built == Run.from_row(row)
