"""``make test`` runs the suite as three pytest runs chosen by marker (hack/test.sh): every
test must fall into exactly one of them, or it would run twice or never."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("cluster", "own_cluster", "api_only", "exclusive")


def run_expressions() -> list[str]:
    """The ``-m`` expressions of hack/test.sh's three pytest runs."""
    script = (ROOT / "hack" / "test.sh").read_text()
    expressions = re.findall(r'pytest[^\n]*?(?:\\\n[^\n]*?)*?-m "([^"]+)"', script)
    assert len(expressions) == 3, expressions
    return expressions


def allowed(markers: tuple[str, ...]) -> bool:
    """The combinations tests/plugins/cluster.py accepts at collection."""
    if "exclusive" in markers and "cluster" not in markers:
        return False
    return not ("api_only" in markers and ({"cluster", "own_cluster"} & set(markers)))


def test_every_allowed_combination_of_markers_runs_in_exactly_one_run(tmp_path: Path) -> None:
    combinations = [
        combination
        for size in range(len(MARKERS) + 1)
        for combination in itertools.combinations(MARKERS, size)
        if allowed(combination)
    ]
    lines = ["import pytest"]
    for index, combination in enumerate(combinations):
        lines += [f"@pytest.mark.{marker}" for marker in combination]
        lines.append(f"def test_{index}():\n    pass")
    (tmp_path / "test_markers.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n" + "".join(f"    {marker}: -\n" for marker in MARKERS)
    )
    runs: dict[str, set[str]] = {}
    for expression in run_expressions():
        listed = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", expression],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        runs[expression] = set(re.findall(r"::(test_\d+)", listed))
    for index, combination in enumerate(combinations):
        chosen = [expression for expression, tests in runs.items() if f"test_{index}" in tests]
        assert len(chosen) == 1, f"markers {combination or '(none)'} are selected by {chosen}"
