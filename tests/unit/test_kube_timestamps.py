"""Kubernetes timestamps are read one way everywhere (``pgsched.k8s.names.timestamp``):
the API server's ``Z`` form, an explicit offset, and a stamp without one (UTC), always as
an aware instant that compares with the database's; anything else is a ValueError, or
None through ``api.parse_timestamp`` for fields someone else wrote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pgsched.k8s import names
from pgsched.k8s.client import api

NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-07T12:00:00Z",
        "2026-12-07T13:00:00+01:00",
        "2026-12-07T12:00:00",
        "2026-12-07T12:00:00.000000Z",
    ],
)
def test_every_form_the_api_server_or_a_person_writes_is_the_same_aware_instant(text):
    found = names.timestamp(text)
    assert found == NOON and found.tzinfo is not None
    assert found - NOON == timedelta(0)  # comparable with aware instants: no TypeError


def test_an_offset_is_kept_not_replaced():
    assert names.timestamp("2026-12-07T12:00:00-05:00").utcoffset() == timezone(
        timedelta(hours=-5)
    ).utcoffset(None)


@pytest.mark.parametrize("bad", [None, 5, "", "yesterday", "2026-13-07T12:00:00Z"])
def test_anything_else_is_a_value_error_or_none_when_lenient(bad):
    with pytest.raises(ValueError):
        names.timestamp(bad)
    assert api.parse_timestamp(bad if isinstance(bad, str) else None) is None
