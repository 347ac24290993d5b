"""docs/notifications.md names every reason a run can be skipped for, and no other.

A target asks for skips by listing ``skipped``, and decides whether it wants them from that
page's table of reasons: a reason the code can write and the page does not name (as
``CalendarExcluded`` once was) is one nobody chose to be paged for. The reasons are read
from where runs are written ``SKIPPED``: the materializer's ``NewRun(…, "SKIPPED",
"<reason>", …)`` and the SQL statements that set or insert that status (``reason =
'<reason>'``, or ``THEN '<reason>'`` beside ``THEN 'SKIPPED'``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "operator" / "pgsched"
SQL = (PACKAGE / "sql" / "functions", PACKAGE / "sql" / "queries")
PYTHON_SKIP = re.compile(r'"SKIPPED",\s*"(\w+)"')
# A statement that writes the status (not one that reads it: `WHEN 'SKIPPED' THEN ...`).
SQL_WRITES_SKIPPED = re.compile(r"\bSET\s+status\s*=\s*'SKIPPED'|\bTHEN\s+'SKIPPED'")
SQL_REASON = re.compile(r"\breason\s*=\s*'(\w+)'|\bTHEN\s+'([A-Z]\w*)'")


def skip_reasons(package: Path, sql_folders: tuple[Path, ...]) -> set[str]:
    found = set()
    for path in package.rglob("*.py"):
        found.update(PYTHON_SKIP.findall(path.read_text()))
    for folder in sql_folders:
        for path in folder.glob("*.sql"):
            for statement in re.split(r";\s*$", path.read_text(), flags=re.M):
                if SQL_WRITES_SKIPPED.search(statement):
                    found.update(a or b for a, b in SQL_REASON.findall(statement))
    return found - {"SKIPPED"}


def documented() -> set[str]:
    text = (ROOT / "docs" / "notifications.md").read_text()
    section = text.split("### Skipped occurrences", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))


def test_the_notifications_page_names_every_skip_reason_the_code_writes():
    assert documented() == skip_reasons(PACKAGE, SQL)


def test_the_scan_finds_skip_reasons_in_python_and_in_each_sql_form(tmp_path):
    (tmp_path / "engine.py").write_text('runs.append(NewRun(at, "SKIPPED",\n  "Planted", note))\n')
    (tmp_path / "q.sql").write_text(
        "UPDATE r SET status = 'SKIPPED', reason = 'Updated' WHERE x;\n"
        "INSERT INTO r SELECT CASE WHEN s THEN 'SKIPPED' ELSE 'QUEUED' END,\n"
        "       CASE WHEN s THEN 'Inserted' END FROM t;\n"
        "SELECT CASE status WHEN 'SKIPPED' THEN 'skipped' WHEN 'FAILED' THEN 'Read' END;\n"
    )
    assert skip_reasons(tmp_path, (tmp_path,)) == {"Planted", "Updated", "Inserted"}
