"""The CRD and the operator's validator describe the same spec, with the same defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from pgsched import spec
from pgsched.spec.fields import ENGINE_FIELDS, EXTRA_FIELDS

CRD = Path(__file__).parents[2] / "crds" / "scheduledjobs.pgsched.dev.yaml"


def schema():
    crd = yaml.safe_load(CRD.read_text())
    [version] = crd["spec"]["versions"]
    return crd, version


def test_crd_names_match_the_design():
    crd, version = schema()
    assert crd["metadata"]["name"] == "scheduledjobs.pgsched.dev"
    names = crd["spec"]["names"]
    assert (names["kind"], names["shortNames"], names["categories"]) == (
        "ScheduledJob",
        ["sj"],
        ["pgsched"],
    )
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == [
        "Schedule",
        "Timezone",
        "Suspend",
        "Ready",
        "Active",
        "Queued",
        "Last Status",
        "Reason",  # -o wide: why the last run ended, or why it is still LAUNCHING
        "Last Run",
        "Last Schedule",
        "Next Run",
        "Age",
        "Message",
    ]
    jsonpaths = {
        column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]
    }
    assert jsonpaths["Last Run"] == ".status.lastRunTime"  # a start, not a scheduled time
    assert jsonpaths["Last Schedule"] == ".status.lastScheduleTime"


def test_crd_spec_fields_are_exactly_the_fields_the_validator_knows():
    _, version = schema()
    properties = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(properties) == ENGINE_FIELDS | EXTRA_FIELDS


def test_crd_defaults_match_the_validator_defaults():
    _, version = schema()
    properties = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    parsed = spec.parse(
        {"schedule": "* * * * *"},
        anchor=datetime(2026, 1, 1, tzinfo=UTC),
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    retry = properties["retryPolicy"]["properties"]
    backoff = retry["backoff"]["properties"]
    assert properties["timeZone"]["default"] == parsed.time_zone
    assert properties["maxConcurrentRuns"]["default"] == parsed.max_concurrent_runs
    assert properties["concurrencyPolicy"]["default"] == parsed.concurrency_policy
    assert properties["catchUp"]["default"] == parsed.catch_up
    assert properties["catchUpLimit"]["default"] == parsed.catch_up_limit
    assert properties["cancelGraceSeconds"]["default"] == parsed.cancel_grace_seconds
    assert properties["dstPolicy"]["properties"]["gap"]["default"] == parsed.dst_gap
    assert properties["dstPolicy"]["properties"]["repeat"]["default"] == parsed.dst_repeat
    assert (
        properties["heartbeat"]["properties"]["intervalSeconds"]["default"]
        == parsed.heartbeat_interval_seconds
    )
    assert retry["maxAttempts"]["default"] == parsed.retry_policy.max_attempts
    assert backoff["initialSeconds"]["default"] == parsed.retry_policy.backoff.initial_seconds
    assert backoff["maxSeconds"]["default"] == parsed.retry_policy.backoff.max_seconds
    assert backoff["multiplier"]["default"] == parsed.retry_policy.backoff.multiplier
    assert backoff["jitter"]["default"] == parsed.retry_policy.backoff.jitter
    enums = {
        "concurrencyPolicy": ("Queue", "Skip", "Replace"),
        "catchUp": ("latest", "all", "none"),
    }
    for field, values in enums.items():
        assert tuple(properties[field]["enum"]) == values


def test_crd_schemas_are_structural_no_additional_properties_beside_properties():
    """The API server refuses a CRD whose schema node has both (it prunes unknown fields
    instead); kubectl apply of the chart's CRDs would fail."""

    def offending(node, path):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" in node:
                yield path
            for key, value in node.items():
                yield from offending(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from offending(value, f"{path}[{index}]")

    for path in sorted((Path(__file__).parents[2] / "crds").glob("*.yaml")):
        assert list(offending(yaml.safe_load(path.read_text()), path.name)) == []
