"""docs/cli.md's table of waits names every reason engine/waits.py gives, and its example
messages are the ones the engine writes (issue 26 #3: the docs say what the screens show)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pgsched.engine import waits

DOCS = Path(__file__).parents[2] / "docs"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def documented() -> dict[str, str]:
    section = (DOCS / "cli.md").read_text().split("### Waits", 1)[1].split("\n\n|", 1)[1]
    table = "|" + section.split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)`", table, flags=re.M)
    return dict(rows)


def row(**overrides):
    base = {
        "id": 20,
        "status": "QUEUED",
        "scheduled_for": T0,
        "deadline_at": None,
        "error": None,
        "namespace": "team-a",
        "max_concurrent_runs": 1,
        "pool": None,
        "kueue_queue": None,
        "awaiting_admission": False,
        "pool_limit": None,
        "holding": [],
        "stopping": [],
        "pool_holding": [],
        "not_before": None,
    }
    return {**base, **overrides}


def test_every_wait_reason_is_documented_with_the_message_the_engine_writes():
    examples = {
        waits.NOT_DUE: row(scheduled_for=T0 + timedelta(minutes=5)),
        waits.JITTERED: row(
            scheduled_for=T0 - timedelta(seconds=5), not_before=T0 + timedelta(seconds=42)
        ),
        waits.MAX_CONCURRENT_RUNS: row(holding=[17]),
        waits.POOL_NOT_FOUND: row(pool="etl", max_concurrent_runs=5),
        waits.POOL_FULL: row(pool="etl", pool_limit=2, pool_holding=[17, 18]),
        waits.AWAITING_ADMISSION: row(status="RUNNING", kueue_queue="team-a"),
        waits.DISPATCH: row(),
    }
    docs = documented()
    reasons = {
        value
        for name, value in vars(waits).items()
        if name.isupper() and isinstance(value, str) and value != waits.DEFERRED_PREFIX
    }
    assert set(docs) == reasons
    for reason, example in examples.items():
        wait = waits.explain(example, now=T0)
        assert wait.reason == reason and docs[reason] == wait.message, (reason, wait.message)
    deferred = waits.explain(row(error="launch deferred: creating Job x: …"), now=T0)
    assert docs[waits.LAUNCH_DEFERRED].startswith(deferred.message.split(":")[0])
    counted = waits.explain(row(holding=[17], deadline_at=T0 + timedelta(seconds=40)), now=T0)
    assert f"`{counted.message}`" in (DOCS / "cli.md").read_text().replace("\n", " ")


def test_operations_md_quotes_the_admission_and_deferral_waits_as_the_engine_words_them():
    text = " ".join((DOCS / "operations.md").read_text().split())
    admission = waits.explain(row(status="RUNNING", kueue_queue="Q"), now=T0).message
    assert f"`Waiting for: {admission}`" in text
    deferred = waits.explain(row(error="launch deferred: …"), now=T0).message
    assert f"`{deferred}`" in text
