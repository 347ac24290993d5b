"""In parallel workers, the longest test modules first, by the durations the previous ``make test`` recorded.

pytest-xdist (``--dist loadscope``) hands whole modules to its workers in collection order,
so a long module collected last runs alone at the end while the other workers idle (seen:
a 112 s notification test ran by itself for the last two minutes of the parallel phase).
Longest first keeps the workers busy until the end. The durations are the JUnit reports
``hack/test.sh`` keeps from the previous run in ``.cache/test-reports/previous``; without
them (a fresh clone, as CI's), or for modules they miss (an interrupted run's), those of
the last full run committed in ``tests/durations.json`` (``python hack/test_durations.py
--write``). Every worker reads the same files, so all collect the same order, which
xdist requires.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = ROOT / ".cache" / "test-reports" / "previous"
COMMITTED = ROOT / "tests" / "durations.json"


def module_seconds(folder: Path) -> Counter[str]:
    """Seconds per test module (``tests/cluster/test_x.py``) in the reports of ``folder``."""
    seconds: Counter[str] = Counter()
    for report in folder.glob("*.xml"):
        try:
            cases = ElementTree.parse(report).iter("testcase")
            for case in cases:
                parts = case.get("classname", "").split(".")
                if parts and parts[-1].startswith("Test"):  # a test class's methods
                    parts.pop()
                module = "/".join(parts) + ".py"
                seconds[module] += float(case.get("time", 0))
        except (ElementTree.ParseError, ValueError):
            continue  # a report cut short by an interrupted run: order by the others
    return seconds


def committed_seconds(path: Path) -> Counter[str]:
    """Seconds per test module as ``hack/test_durations.py --write`` committed them."""
    try:
        return Counter({str(k): float(v) for k, v in json.loads(path.read_text()).items()})
    except (OSError, ValueError, AttributeError):
        return Counter()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process runs everything in turn: the order changes nothing
    # The previous run's figures where it has them (an interrupted run's reports miss
    # modules), the committed ones for the rest.
    seconds = {**committed_seconds(COMMITTED), **module_seconds(PREVIOUS)}
    if not seconds:
        return

    def cost(item: pytest.Item) -> float:
        return seconds.get(item.nodeid.split("::", 1)[0], 0.0)

    items.sort(key=cost, reverse=True)  # stable: a module's tests keep their order
