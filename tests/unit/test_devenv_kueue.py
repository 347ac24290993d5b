"""Kueue's webhook configurations as the harness writes them (``devenv.kueue``), from the
manifests of the Kueue module built by ``make kueue``: what the real Kueue does with them is
tests/cluster/test_runs_that_cannot_start.py's to show."""

from __future__ import annotations

import pytest

from devenv import kueue
from devenv.binaries import MissingBinariesError
from plugins.cluster import missing

URL = "https://127.0.0.1:9443"


@pytest.fixture(scope="module")
def manifests() -> str:
    try:
        built = kueue.locate()
    except MissingBinariesError as error:
        missing(error, "Kueue's build")
    return (built / "webhook" / "manifests.yaml").read_text()


def webhooks(configurations: list[dict]) -> list[dict]:
    return [webhook for each in configurations for webhook in each["webhooks"]]


def jobs_webhooks(configurations: list[dict]) -> list[dict]:
    return [
        webhook
        for webhook in webhooks(configurations)
        if any("batch" in rule["apiGroups"] for rule in webhook["rules"])
    ]


def test_given_namespaces_the_jobs_webhooks_see_only_their_jobs(manifests: str) -> None:
    configurations = kueue.webhook_configurations(
        manifests, url=URL, ca_bundle="Q0E=", namespaces=["team-a"]
    )
    jobs = jobs_webhooks(configurations)
    assert len(jobs) == 2  # mutating and validating
    for webhook in jobs:
        assert webhook["namespaceSelector"] == {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
            ]
        }
    # Kueue's own kinds are Kueue's wherever they are.
    others = [w for w in webhooks(configurations) if w not in jobs]
    assert others and all("namespaceSelector" not in w for w in others)


def test_without_namespaces_every_job_goes_through_kueue(manifests: str) -> None:
    configurations = kueue.webhook_configurations(manifests, url=URL, ca_bundle="Q0E=")
    jobs = jobs_webhooks(configurations)
    assert len(jobs) == 2
    assert all("namespaceSelector" not in webhook for webhook in jobs)
    assert all(w["clientConfig"]["url"].startswith(URL + "/") for w in webhooks(configurations))
