"""docs/security*.md, the threat model, points at the test that proves each "must never":
every test it names exists, and so does every test file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGES = sorted((ROOT / "docs").glob("security*.md"))
_TEST = re.compile(r"\b(test_[a-z0-9_]+)\b(?!\.py)(?![*…])")
_FILE = re.compile(r"\b(tests/[a-z_/]+\.py)\b")


def defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^\s*def (test_[a-z0-9_]+)", path.read_text(), re.MULTILINE))
        names.add(path.stem)  # a test module named on its own
    return names


def test_the_threat_model_has_its_pages() -> None:
    assert [p.name for p in PAGES] == [
        "security-chart.md",
        "security-cli.md",
        "security-database.md",
        "security-ui.md",
        "security.md",
    ]


def test_every_test_the_threat_model_names_exists() -> None:
    known = defined_tests()
    named = {name for page in PAGES for name in _TEST.findall(page.read_text())}
    assert len(named) > 40
    assert sorted(named - known) == []


def test_every_test_file_the_threat_model_names_exists() -> None:
    files = {name for page in PAGES for name in _FILE.findall(page.read_text())}
    assert files
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []
