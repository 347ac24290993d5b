"""The next step this suite proposes for the dispatcher: the whole claim in one call.

The engine already does what the profiles asked for first (``pgsched.engine.dispatch``):
it locks only the definitions a batch needs, tries rather than waits for the further ones,
and fetches the launch step's definitions in one query. :func:`run_once_sql` goes one step
further: the claim as one server-side function (``bench/sql/prototype/claim_function.sql``),
so a claim is one round trip and Python parses only the claimed rows. It is measured next
to the engine as the ``prototype, one call`` arm; it handles ``concurrencyPolicy: Queue``
only (all the benchmarks use), which is why it is a prototype and not the engine.
"""

from __future__ import annotations

from pathlib import Path

from bench import queries
from pgsched.db.connection import Connection
from pgsched.engine import dispatch
from pgsched.engine.launcher import Launcher
from pgsched.engine.models import Definition, Run

FUNCTION = Path(__file__).parent / "sql" / "prototype" / "claim_function.sql"


def install(conn: Connection) -> None:
    """Create ``bench.claim`` in this database (once, before any worker calls it)."""
    conn.execute(FUNCTION.read_text(encoding="utf-8"))  # type: ignore[call-overload]


def run_once_sql(conn: Connection, launcher: Launcher, *, batch_size: int) -> tuple[list[Run], int]:
    """Claim with one call of ``bench.claim``, then launch. Returns the runs and how many
    candidates were passed over; the function does not say, so an empty claim with runs
    still queued counts as 1."""
    claimed = [
        Run.from_row(row)
        for row in conn.execute(
            queries.get("proposal_claim_call"),
            {"batch": batch_size, "overshoot": dispatch.DEFAULT_OVERSHOOT},
        )
    ]
    if not claimed:
        row = conn.execute(queries.get("proposal_any_queued")).fetchone()
        return [], int(bool(row and row["any"]))
    _launch(conn, launcher, claimed)
    return claimed, 0


def _launch(conn: Connection, launcher: Launcher, claimed: list[Run]) -> None:
    """The launch step with every owner definition fetched in one query."""
    if not claimed:
        return
    owners = {
        row["id"]: Definition.from_row(row)
        for row in conn.execute(
            queries.get("proposal_definitions"),
            {"ids": sorted({run.definition_id for run in claimed})},
        )
    }
    for run in claimed:
        launcher.launch(run, owners[run.definition_id])
