"""The parallel phase hands out the longest modules first (tests/plugins/ordering.py), by
the durations of the previous run's JUnit reports."""

from __future__ import annotations

from pathlib import Path

from plugins.ordering import module_seconds

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
