"""The parallel phases hand out the longest modules first (tests/plugins/ordering.py), by
the durations of the previous run's JUnit reports, or the committed ones."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from plugins.ordering import COMMITTED, committed_seconds, module_seconds

ROOT = Path(__file__).resolve().parents[2]

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.cluster.test_slow" name="test_a" time="100.5"/>
<testcase classname="tests.cluster.test_slow" name="test_b" time="20"/>
<testcase classname="tests.cluster.test_classy.TestThings" name="test_c" time="7"/>
<testcase classname="tests.cluster.test_quick" name="test_d" time="1.25"/>
</testsuite></testsuites>
"""


def test_seconds_add_up_per_module_test_classes_included(tmp_path: Path) -> None:
    (tmp_path / "parallel.xml").write_text(REPORT)
    seconds = module_seconds(tmp_path)
    assert seconds["tests/cluster/test_slow.py"] == 120.5
    assert seconds["tests/cluster/test_classy.py"] == 7
    assert seconds.most_common(1) == [("tests/cluster/test_slow.py", 120.5)]


def test_a_report_cut_short_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "parallel.xml").write_text(REPORT)
    (tmp_path / "alone.xml").write_text(REPORT[: len(REPORT) // 2])
    assert module_seconds(tmp_path)["tests/cluster/test_quick.py"] == 1.25


def test_a_fresh_clone_orders_by_the_committed_durations(tmp_path: Path) -> None:
    """CI's clean clone has no previous reports: ``hack/test_durations.py --write`` keeps
    the last full run's seconds per module in tests/durations.json, which the order reads."""
    spec = importlib.util.spec_from_file_location("durations", ROOT / "hack/test_durations.py")
    assert spec is not None and spec.loader is not None
    durations = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = durations  # its dataclass looks its module up
    spec.loader.exec_module(durations)
    (tmp_path / "parallel.xml").write_text(REPORT)
    committed = tmp_path / "durations.json"
    committed.write_text(durations.module_durations(durations.cases(tmp_path)))
    seconds = committed_seconds(committed)
    assert seconds.most_common(1) == [("tests/cluster/test_slow.py", 120)]  # whole seconds
    assert seconds["tests/cluster/test_classy.py"] == 7
    assert committed_seconds(tmp_path / "missing.json") == {}


def test_the_committed_durations_name_modules_that_exist() -> None:
    seconds = committed_seconds(COMMITTED)
    assert len(seconds) > 50, "python hack/test_durations.py --write after a full make test"
    assert all((ROOT / module).is_file() for module in seconds), sorted(
        module for module in seconds if not (ROOT / module).is_file()
    )


def test_an_interrupted_runs_reports_are_completed_by_the_committed_durations(
    tmp_path: Path, monkeypatch
) -> None:
    """An interrupted ``make test`` leaves reports without most modules: those keep the
    committed durations, and the modules it has take the newer figures."""
    import plugins.ordering as ordering

    (tmp_path / "previous").mkdir()
    (tmp_path / "previous" / "parallel.xml").write_text(REPORT)
    committed = tmp_path / "durations.json"
    committed.write_text('{"tests/cluster/test_quick.py": 500, "tests/cluster/test_other.py": 300}')
    monkeypatch.setattr(ordering, "PREVIOUS", tmp_path / "previous")
    monkeypatch.setattr(ordering, "COMMITTED", committed)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    items = [
        Item(f"tests/cluster/{name}.py::t") for name in ("test_quick", "test_other", "test_slow")
    ]
    ordering.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.nodeid.split("/")[-1] for item in items] == [
        "test_other.py::t",  # 300 s committed, not in the interrupted run
        "test_slow.py::t",  # 120.5 s in the interrupted run
        "test_quick.py::t",  # 1.25 s there, newer than the committed 500 s
    ]
