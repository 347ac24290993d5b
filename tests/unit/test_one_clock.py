"""One clock: the database's, and this machine's only through ``db/clock.py``.

Code that needs "now" takes it as an argument (or a clock), and SQL trusts the database
clock with one idiom, ``coalesce(%(now)s::timestamptz, now())`` (docs/architecture.md,
"Time"). A bare ``datetime.now(`` or ``time.time(`` anywhere else in the product would be a
second clock that a test cannot pin and that disagrees with the database's.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "operator" / "pgsched"
CLOCK_MODULE = PACKAGE / "db" / "clock.py"
# The development harness (a fake kubelet, a local control plane) is not the product.
NOT_THE_PRODUCT = PACKAGE / "devenv"
WALL_CLOCK = re.compile(r"\bdatetime\.(now|utcnow|today)\(|\btime\.time(_ns)?\(|\bdate\.today\(")
QUERIES = PACKAGE / "sql" / "queries"


def wall_clock_reads(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == CLOCK_MODULE or path.is_relative_to(NOT_THE_PRODUCT):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if WALL_CLOCK.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_only_the_clock_module_reads_the_wall_clock():
    assert wall_clock_reads(PACKAGE) == [], "take now as an argument, or use db.clock.local()"


def test_the_check_finds_a_planted_wall_clock_read(tmp_path):
    (tmp_path / "handlers.py").write_text("stamp = datetime.now(UTC)\nother = time.time()\n")
    assert len(wall_clock_reads(tmp_path)) == 2


def test_named_queries_pin_the_database_clock_with_one_idiom():
    """Every ``now()`` in a named query is the fallback of a pinnable ``%(now)s`` (or of
    another parameter that defaults to "now")."""
    bare = []
    for path in sorted(QUERIES.glob("*.sql")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("--")[0]
            for match in re.finditer(r"\b(now|clock_timestamp)\(\)", code):
                before = code[: match.start()]
                if not re.search(r"coalesce\(%\(\w+\)s(::timestamptz)?,\s*$", before):
                    bare.append(f"{path.name}:{number}: {line.strip()}")
    assert bare == [], "use coalesce(%(now)s::timestamptz, now())"
