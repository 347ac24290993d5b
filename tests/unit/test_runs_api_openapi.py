"""``kubectl explain run`` reads the Run API's OpenAPI document: every field a Run carries
is described there, and the aggregator finds the document by the path and hash it gives."""

from __future__ import annotations

import json
from typing import Any

from pgsched.k8s.runs_api import openapi, resources
from unit.test_runs_api_watch import completed_run

SCHEMAS = json.loads(openapi.document())["components"]["schemas"]


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return SCHEMAS[ref.rsplit("/", 1)[1]] if ref else schema


def undocumented(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    schema = resolve(schema)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        missing = []
        for key, inner in value.items():
            if key in properties:
                missing += undocumented(inner, properties[key], f"{path}.{key}")
            elif "additionalProperties" not in schema:
                missing.append(f"{path}.{key}")
        return missing
    if isinstance(value, list) and value:
        return undocumented(value[0], schema.get("items", {}), f"{path}[]")
    return []


def test_every_field_of_a_run_is_described():
    run = resources.run_object(completed_run(), "12")
    run["status"]["requestedBy"] = "alice"  # a manual run's, shown for those only
    run["status"]["triggeredRuns"] = [{"scheduledJob": "b", "runId": 8, "status": "QUEUED"}]
    run["status"]["upstreamRunIds"] = [3]
    assert undocumented(run, SCHEMAS["dev.pgsched.runs.v1alpha1.Run"], "Run") == []
    assert all(
        field.get("description") or "$ref" in field
        for field in SCHEMAS["dev.pgsched.runs.v1alpha1.Run"]["properties"]["status"][
            "properties"
        ].values()
    )


def test_kubectl_finds_the_run_by_its_group_version_kind():
    run = SCHEMAS["dev.pgsched.runs.v1alpha1.Run"]
    assert run["x-kubernetes-group-version-kind"] == [
        {"group": "runs.pgsched.dev", "version": "v1alpha1", "kind": "Run"}
    ]


def test_the_aggregator_is_given_the_path_and_a_hash_of_the_document():
    [(path, entry)] = openapi.discovery()["paths"].items()
    assert path == "apis/runs.pgsched.dev/v1alpha1"
    url = entry["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/runs.pgsched.dev/v1alpha1?hash=")
    assert len(url.rsplit("=", 1)[1]) == 32
