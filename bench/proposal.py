"""A prototype of the dispatcher changes this benchmark suite proposes — an experiment
measured next to the engine, not a replacement for it (the engine is ``pgsched.engine``).

Same candidates, same caps check after the locks, same claim statement (the engine's own
queries); three differences, each aimed at a cost the profiles found:

1. **Lock only what the batch needs.** The engine locks every distinct definition among
   its ~4 x batch candidates (~180 locks and running counts for a batch of 50 over 1,000
   definitions) though at most ``batch`` runs are claimed. Here the definitions of the
   first candidates that could fill the batch are locked and counted first; only if caps
   leave the batch short are the next candidates' definitions tried.
2. **Try-lock, never wait.** ``pg_try_advisory_xact_lock``: a definition another
   dispatcher holds is skipped this time, the way SKIP LOCKED skips rows. With blocking
   locks, two dispatchers whose candidate pools share any definition (with 1,000
   definitions and 4 x 50 candidates each: nearly always) run one after the other. The cap
   rule is unchanged: a run is claimed only under its definition's lock, counted by a
   statement that starts after the lock was granted.
3. **One query for the launch step's definitions**, instead of one per definition.

:func:`run_once_sql` goes one step further: the same claim as one server-side function
(``bench/sql/prototype/claim_function.sql``), so a claim is one round trip and Python
parses only the claimed rows.

Both handle ``concurrencyPolicy: Queue`` only (all the benchmarks use); Skip/Replace would
carry over unchanged from the engine's ``_choose``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from bench import queries
from pgsched.db import queries as engine_queries
from pgsched.db.connection import Connection
from pgsched.engine import dispatch
from pgsched.engine.launcher import Launcher
from pgsched.engine.models import Definition, Run

FUNCTION = Path(__file__).parent / "sql" / "prototype" / "claim_function.sql"


def install(conn: Connection) -> None:
    """Create ``bench.claim`` in this database (once, before any worker calls it)."""
    conn.execute(FUNCTION.read_text(encoding="utf-8"))  # type: ignore[call-overload]


def run_once(conn: Connection, launcher: Launcher, *, batch_size: int) -> tuple[list[Run], int]:
    """Claim and launch; returns the runs and how many candidates were passed over because
    their definition was at its cap or being claimed by another dispatcher."""
    claimed, passed = claim(conn, batch_size=batch_size)
    _launch(conn, launcher, claimed)
    return claimed, passed


def run_once_sql(conn: Connection, launcher: Launcher, *, batch_size: int) -> tuple[list[Run], int]:
    """:func:`run_once` with the claim as one call of ``bench.claim``. The function does
    not say what it passed over, so an empty claim with runs still queued counts as 1."""
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


def claim(
    conn: Connection, *, batch_size: int, overshoot: int = dispatch.DEFAULT_OVERSHOOT
) -> tuple[list[Run], int]:
    with conn.transaction():
        candidates = conn.execute(
            engine_queries.get("claim_candidates"),
            {"now": None, "limit": batch_size * overshoot, "definition_ids": None},
        ).fetchall()
        room: dict[UUID, int] = {}  # definitions locked by us -> runs they may still start
        tried: set[UUID] = set()
        chosen: list[int] = []
        while len(chosen) < batch_size:
            wanted = _next_definitions(candidates, tried, batch_size - len(chosen))
            if not wanted:
                break
            tried.update(wanted)
            locked = [
                row["id"]
                for row in conn.execute(queries.get("proposal_try_lock"), {"ids": sorted(wanted)})
            ]
            if locked:
                for row in conn.execute(
                    engine_queries.get("dispatch_limits"), {"definition_ids": locked}
                ):
                    room[row["id"]] = (
                        0 if row["deleted"] else max(0, row["max_concurrent_runs"] - row["running"])
                    )
            chosen = _choose(candidates, room, batch_size)
        passed = sum(1 for row in candidates if row["definition_id"] in tried) - len(chosen)
        if len(chosen) == batch_size:
            passed = 0  # a full batch passed over nothing that mattered
        if not chosen:
            return [], passed
        rows = conn.execute(
            engine_queries.get("claim_runs"), {"ids": chosen, "now": None}
        ).fetchall()
    return [Run.from_row(row) for row in rows], passed


def _next_definitions(
    candidates: Sequence[dict[str, object]], tried: set[UUID], slots: int
) -> list[UUID]:
    """Distinct untried definitions of the earliest candidates that could fill ``slots``."""
    wanted: list[UUID] = []
    covered = 0
    for row in candidates:
        definition_id = row["definition_id"]
        assert isinstance(definition_id, UUID)
        if definition_id in tried:
            continue
        if definition_id not in wanted:
            wanted.append(definition_id)
        covered += 1
        if covered >= slots:
            break
    return wanted


def _choose(
    candidates: Sequence[dict[str, object]], room: dict[UUID, int], batch_size: int
) -> list[int]:
    """Walk candidates in scheduled order; take what locked definitions have room for."""
    left = dict(room)
    chosen: list[int] = []
    for row in candidates:
        definition_id = row["definition_id"]
        run_id = row["id"]
        assert isinstance(definition_id, UUID) and isinstance(run_id, int)
        if left.get(definition_id, 0) > 0:
            left[definition_id] -= 1
            chosen.append(run_id)
            if len(chosen) == batch_size:
                break
    return chosen
