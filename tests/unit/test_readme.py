"""The README is the front door: short, its links alive, its two commands the real ones.

Everything else lives in docs/, built into a site by ``make docs`` (part of ``make lint``),
whose strict build checks the links between pages.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_stays_a_front_door_of_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository() -> None:
    targets = [t for t in _LINK.findall(README.read_text()) if "://" not in t]
    assert targets, "the README links its documentation"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "| `make test` |" in readme and "| `make demo` |" in readme
    assert re.search(r"^make test$", ci, re.MULTILINE), ".ci/run calls `make test` unchanged"
