"""Every page in a real headless Chromium; the screenshots in docs/ui/ come from here.

The screenshots go to a temporary folder, removed when the test process ends, unless
``PGSCHED_UPDATE_SCREENSHOTS=1`` is set (then into docs/ui/, to be committed), so a test
run never dirties the checkout nor /tmp. Without Chromium the tests are skipped, except
where ``PGSCHED_REQUIRE_CLUSTER`` is set (CI): there a missing browser is an error, not a
reason to test less.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser

from conftest import SOFIA, History, Served

DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
_TEMPORARY_SHOTS = tempfile.TemporaryDirectory(prefix="pgsched-ui-shots-")  # gone at exit
SHOTS = DOCS_SHOTS if os.environ.get("PGSCHED_UPDATE_SCREENSHOTS") else Path(_TEMPORARY_SHOTS.name)

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("PGSCHED_REQUIRE_CLUSTER"),
    reason="needs Debian's chromium (apt-get install chromium)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    opened = Browser()
    try:
        yield opened
    finally:
        opened.close()


def local(moment: object) -> str:
    return moment.astimezone(SOFIA).strftime("%Y-%m-%d %H:%M")  # type: ignore[attr-defined]


def test_overview_renders_in_a_browser(browser: Browser, ui: Served, history: History) -> None:
    browser.open(ui.url + "/")
    table = browser.text("#overview")
    assert "daily at 09:00 Europe/Sofia" in table and "Ready" in table
    cells = browser.evaluate("[...document.querySelectorAll('.strip a')].map(a => a.className)")
    assert cells == [
        "cell FAILED",
        "cell COMPLETED",
        "cell SKIPPED",
        "cell COMPLETED",
        "cell COMPLETED",
    ]
    browser.screenshot(SHOTS / "overview.png")


def test_job_page_timeline_shows_skip_reason_and_retry_chain(
    browser: Browser, ui: Served, history: History
) -> None:
    browser.open(ui.url + "/ns/team-a/report")
    events = browser.text("#events")
    assert "SKIPPED/DeadlineMissed" in events
    assert f"retry of run {history.ids['failed']}" in events
    bars = browser.evaluate("document.querySelectorAll('#timeline .bar').length")
    marks = browser.evaluate("[...document.querySelectorAll('#timeline .mark')].map(m => m.title)")
    assert bars == 4  # four runs started; the skipped occurrence is a mark with its reason
    assert len(marks) == 1 and "SKIPPED/DeadlineMissed" in marks[0]
    browser.screenshot(SHOTS / "job.png")
    # the retry link leads to the retried attempt
    browser.evaluate(
        f"document.querySelector('#events a[href=\"/runs/{history.ids['failed']}\"]').click()"
    )
    browser._wait_for("Page.loadEventFired")
    assert "FAILED/BackoffLimitExceeded" in browser.text("main")


def test_run_page_renders_the_retry_chain(browser: Browser, ui: Served, history: History) -> None:
    browser.open(ui.url + f"/runs/{history.ids['retry']}")
    chain = browser.text("#chain")
    assert "FAILED/BackoffLimitExceeded" in chain and "COMPLETED/Succeeded" in chain
    browser.screenshot(SHOTS / "run.png")


@pytest.mark.parametrize(
    ("typed", "verdict"),
    [("skipped", "skipped"), ("completed", "completed"), ("never", "never-scheduled")],
)
def test_why_form_answers(
    browser: Browser, ui: Served, history: History, typed: str, verdict: str
) -> None:
    at = history.completed + timedelta(minutes=17) if typed == "never" else getattr(history, typed)
    browser.open(ui.url + "/ns/team-a/report")
    browser.submit("input[name=at]", local(at))
    assert browser.evaluate("document.querySelector('#answer').dataset.verdict") == verdict
    if typed == "skipped":
        assert "DeadlineMissed" in browser.text("#answer")
    if typed == "never":
        assert "Never scheduled" in browser.text("#answer")
        browser.screenshot(SHOTS / "why.png")


def test_bad_input_page_in_a_browser(browser: Browser, ui: Served, history: History) -> None:
    browser.open(ui.url + "/ns/team-a/report/why?at=tuesday-ish")
    assert "is not a date and time" in browser.text("#error")
    browser.screenshot(SHOTS / "error.png")
