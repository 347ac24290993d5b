"""The benchmarks' SQL, loaded from ``bench/sql/*.sql`` and ``bench/pgbench/*.sql``.

Same convention as the engine (``pgsched.db.queries``): named blocks introduced by
``-- name: <name>`` lines, ``%(name)s`` parameters, never SQL built by concatenation.
The raw claim baseline is a pgbench script (``:batch`` variable); :func:`raw_claim` binds
that same file for psycopg, so pgbench and Python measure one text, not two copies.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import LiteralString, cast

from psycopg import sql

HERE = Path(__file__).parent
RAW_CLAIM_SCRIPT = HERE / "pgbench" / "raw_claim.sql"

_MARKER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@functools.cache
def _all() -> dict[str, sql.SQL]:
    found: dict[str, sql.SQL] = {}
    for path in sorted((HERE / "sql").glob("*.sql")):
        parts = _MARKER.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"bench query {name!r} is defined twice (second in {path.name})")
            found[name] = _literal(body)
    return found


def get(name: str) -> sql.SQL:
    try:
        return _all()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r} in bench/sql") from None


@functools.cache
def raw_claim() -> sql.SQL:
    """The seed's claim query from the pgbench script, with ``:batch`` as ``%(batch)s``."""
    text = RAW_CLAIM_SCRIPT.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return _literal(body.replace(":batch", "%(batch)s"))


def _literal(text: str) -> sql.SQL:
    return sql.SQL(cast(LiteralString, text.strip().rstrip(";")))
