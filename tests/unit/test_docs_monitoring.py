"""The example dashboard and alerts parse and use only metrics and labels pgsched exports.

A renamed metric or label in ``pgsched/metrics.py`` would otherwise leave a dashboard
panel empty and an alert silently never firing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from pgsched import metrics

ROOT = Path(__file__).parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
_METRIC = re.compile(r"\bpgsched_[a-z_]+\b")
_SELECTOR = re.compile(r"\b(pgsched_[a-z_]+)\{([^}]*)\}")
_MATCHER = re.compile(r"\s*([a-zA-Z_]+)\s*(=~|!~|!=|=)\s*\"[^\"]*\"\s*")
_BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def exported() -> dict[str, set[str]]:
    """Every sample name pgsched exports → the label names it carries."""
    found: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        [family] = value.describe()
        labels = set(value._labelnames)
        for suffix in SUFFIXES[family.type]:
            found[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return found


def alert_rules() -> list[dict]:
    document = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    assert document["kind"] == "PrometheusRule"
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def dashboard() -> dict:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def dashboard_expressions() -> list[str]:
    return [
        target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]


def expressions() -> list[str]:
    return [rule["expr"] for rule in alert_rules()] + dashboard_expressions()


def test_every_alert_has_a_severity_a_summary_and_a_description():
    rules = alert_rules()
    assert {"PgschedNoLeader", "PgschedRunsFailingRepeatedly", "PgschedScheduleSkewHigh",
            "PgschedHeartbeatsLost"} <= {rule["alert"] for rule in rules}  # fmt: skip
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_no_leader_alert_sums_the_leader_gauge_over_replicas():
    [rule] = [rule for rule in alert_rules() if rule["alert"] == "PgschedNoLeader"]
    assert rule["expr"].replace(" ", "") == "sum(pgsched_tick_leader)==0"


def test_the_dashboard_has_unique_panel_ids_and_a_datasource_variable():
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    assert "datasource" in {item["name"] for item in board["templating"]["list"]}


@pytest.mark.parametrize("expression", expressions())
def test_expressions_use_only_exported_metrics_and_their_labels(expression):
    samples = exported()
    used = set(_METRIC.findall(expression))
    assert used, f"no pgsched metric in {expression!r}"
    unknown = used - samples.keys()
    assert not unknown, f"{sorted(unknown)} are not exported by pgsched/metrics.py"
    for name, matchers in _SELECTOR.findall(expression):
        for label in (match[0] for match in _MATCHER.findall(matchers)):
            assert label in samples[name], f"{name} has no label {label!r}"
    available = set().union(*(samples[name] for name in used))
    for group in _BY.findall(expression):
        for label in filter(None, (part.strip() for part in group.split(","))):
            assert label in available, f"no metric of {expression!r} has the label {label!r}"


def test_the_dashboard_shows_every_metric_pgsched_exports():
    shown = {name for expr in dashboard_expressions() for name in _METRIC.findall(expr)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in shown}
    missing = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported()} - families
    assert not missing, f"metrics without a dashboard panel: {sorted(missing)}"
