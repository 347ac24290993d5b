"""Planted bugs, installed from outside the product: what the self-tests switch off.

The chaos self-tests and the race negative controls prove that their checks can fail by
running the engine with one safeguard removed; the lock-cost benchmark measures the same
claim with and without its locks. None of that may ship as a mode of the product, so the
broken variants are made here, by the test or benchmark that wants them:

- :func:`install_unlocked_claim` creates ``pgsched_planted.claim_for_dispatch`` in the
  database under test: the production function's own source (read back from the server,
  so it can never drift from it) with its per-definition and per-pool locks taken out;
  :func:`use_unlocked_claim` points this process's ``claim_for_dispatch`` query at it.
- :func:`install_poolless_claim` creates the same function with its locks but without the
  concurrency pools' limit: the planted I9 bug (pools over their limit).
- :func:`install_claim_sparing_unlocked_candidates` creates it with a "room to spare"
  verdict (which claims a batch without the choice) blind to the candidates whose
  definitions another dispatcher holds: a planted I2 bug of try-mode dispatchers.
- :class:`LeaderlessTicker` is the real tick loop acting as leader on every tick, as a
  paused-then-woken leader would.

Tests import this module too (``bench`` is importable from the repository root).
"""

from __future__ import annotations

from typing import LiteralString, cast

from psycopg import sql

from pgsched.db import queries
from pgsched.db.connection import Connection
from pgsched.engine.tick import Ticker

SCHEMA = "pgsched_planted"
_REAL: dict[str, sql.SQL] = {}
_CLAIM = "pgsched.claim_for_dispatch(integer, integer, timestamptz, uuid[], text)"
# What takes the locks in the function's source, and what each becomes: nothing.
_LOCKS = {
    "pgsched.lock_claim_keys('dispatch', want_defs::text[], 'wait')": "NULL",
    "pgsched.lock_claim_keys('dispatch', want_defs::text[], 'try')::uuid[]": "want_defs",
    "pgsched.lock_claim_keys('pool', want_pools, 'wait')": "NULL",
    "pgsched.lock_claim_keys('pool', want_pools, 'try')": "want_pools",
}


# What checks a pool's room in the choice, and what it becomes: no check.
_POOL_CHECK = {
    "AND (eligible.pool IS NULL OR eligible.pool_n <= eligible.pool_room)": "",
}

# What makes the claim's "room to spare" verdict (pgsched.claim_for_dispatch: when it holds, every
# candidate is claimed as it is, without the choice) judge every candidate, and what it
# becomes: a verdict on the candidates whose definitions it locked and counted only. A
# candidate whose definition another dispatcher holds (try mode) is then claimed unlocked
# and uncounted.
_SPARE_VERDICT = {
    "LEFT JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running, lim_pool)": (
        "JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running, lim_pool)"
    ),
}


def install_unlocked_claim(conn: Connection) -> None:
    """Create ``pgsched_planted.claim_for_dispatch``: the claim minus its claim locks.

    Call once per database, before any process uses it (concurrent CREATE OR REPLACE of one
    function fails with "tuple concurrently updated")."""
    _install(conn, _LOCKS)


def install_poolless_claim(conn: Connection) -> None:
    """Create ``pgsched_planted.claim_for_dispatch``: the claim, locks and caps intact,
    that ignores its pools' limits. Route to it with :func:`use_unlocked_claim`."""
    _install(conn, _POOL_CHECK)


def install_claim_sparing_unlocked_candidates(conn: Connection) -> None:
    """Create ``pgsched_planted.claim_for_dispatch``: the claim whose "room to spare"
    verdict overlooks the candidates of definitions it did not lock. Route to it with
    :func:`use_unlocked_claim`."""
    _install(conn, _SPARE_VERDICT)


def _install(conn: Connection, replacements: dict[str, str]) -> None:
    row = conn.execute("SELECT pg_get_functiondef(%s::regprocedure) AS source", [_CLAIM]).fetchone()
    assert row is not None
    source: str = row["source"]
    for lock, nothing in replacements.items():
        if lock not in source:
            raise RuntimeError(
                f"pgsched.claim_for_dispatch no longer contains {lock!r}: update the planted"
                " bug in bench/planted.py to remove what it does now"
            )
        source = source.replace(lock, nothing)
    source = source.replace(
        "FUNCTION pgsched.claim_for_dispatch(", f"FUNCTION {SCHEMA}.claim_for_dispatch(", 1
    )
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL(cast(LiteralString, source)))


def use_unlocked_claim(unlocked: bool = True) -> None:
    """Point this process's ``claim_for_dispatch`` query at the planted claim (installed
    beforehand: unlocked or poolless), or back at the real one with ``unlocked=False``."""
    found = queries._all()
    real = _REAL.setdefault("claim_for_dispatch", found["claim_for_dispatch"])
    text = real.as_string()
    planted = text.replace("pgsched.claim_for_dispatch(", f"{SCHEMA}.claim_for_dispatch(")
    assert planted != text, text
    found["claim_for_dispatch"] = sql.SQL(cast(LiteralString, planted)) if unlocked else real


class LeaderlessTicker(Ticker):
    """The tick loop with leader election bypassed: every tick acts as leader."""

    def _lead(self, conn: Connection) -> bool:
        return True

    def _step_down(self, conn: Connection) -> None:
        pass
