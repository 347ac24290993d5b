"""examples/report-parameters.yaml: jitter, an active window and parameters, as applied."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from pgsched import spec
from pgsched.engine import definitions, parameters

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "report-parameters.yaml"


def test_the_example_is_valid_and_runs_only_in_its_window():
    document = yaml.safe_load(EXAMPLE.read_text())
    now = datetime(2026, 12, 1, tzinfo=UTC)
    parsed = spec.parse(document["spec"], hash_seed="default/report", anchor=now, now=now)
    built = definitions.build_schedule(parsed, hash_seed="default/report", anchor=now)
    first = built.next_after(now)
    assert first is not None and first.at == datetime(2027, 1, 1, 6, 30, tzinfo=UTC)
    assert built.next_after(datetime(2027, 12, 31, 12, tzinfo=UTC)) is None
    declared = parameters.declared(document["spec"])
    assert parameters.check(declared, {"region": "us-east-1", "day": "2027-03-01"}) == []
    assert [item.name for item in parameters.check(declared, {"region": "Mars"})] == ["region"]
