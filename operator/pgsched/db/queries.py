"""Named SQL queries, loaded once from ``pgsched/sql/queries/*.sql``.

Every query pgsched runs lives in a ``.sql`` file, in blocks introduced by a marker line::

    -- name: claim_runs
    UPDATE pgsched.job_runs ...

and is called by name: ``conn.execute(queries.get("claim_runs"), params)``. Parameters use
psycopg's ``%(name)s`` style. Keeping SQL out of Python means a query can be read, run in
psql and EXPLAINed exactly as the engine sends it.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, LiteralString, cast

if TYPE_CHECKING:
    from psycopg import sql

_MARKER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@functools.cache
def _all() -> dict[str, sql.SQL]:
    # Imported here, not at the top: commands that never query (``pgsched next --cron``,
    # ``--help``) then start without loading psycopg (bench/README.md, "CLI start-up").
    from psycopg import sql

    found: dict[str, sql.SQL] = {}
    folder = resources.files("pgsched") / "sql" / "queries"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        parts = _MARKER.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice (second in {entry.name})")
            found[name] = sql.SQL(cast(LiteralString, body.strip().rstrip(";")))
    return found


def get(name: str) -> sql.SQL:
    """The query called ``name``; a typo fails loudly at the first call."""
    try:
        return _all()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r} in pgsched/sql/queries") from None
