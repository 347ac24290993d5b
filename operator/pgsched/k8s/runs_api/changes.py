"""The order watches of runs follow: run changes get their place after they commit.

Every change of a run (the ``run_events`` outbox) is also kept a while in
``pgsched.run_changes`` by a trigger, without a place. This module's ``sequence`` gives the
committed ones their places (``seq``, a watch's resourceVersion) one sequencer at a time,
so a watcher that has seen a place has seen every committed change before it (migration
0040 says why writers cannot number their own changes). ``prune`` forgets changes older
than ``KEEP_SECONDS``: a watch asking to resume from before that is answered 410 Gone, and
lists again, as with the API server's compacted revisions.

Both are periodic services (``engine.loop``): ``sequence`` in the Run API's own loop, on
every replica that serves it (the advisory lock makes the others' rounds no-ops);
``prune`` in the operator's, Run API or not, since the trigger keeps changes either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pgsched.db import queries
from pgsched.db.connection import Connection

# How often committed changes get their places: a watch sees a change at most this long
# plus its own poll after the change's commit (docs/runs-api.md, "Watching").
SEQUENCE_SECONDS = 0.2
# A round places at most this many; a round that placed a full batch runs again at once.
BATCH = 10_000
# How long changes are kept for watches to resume from, and how often older ones go.
KEEP_SECONDS = 900.0
PRUNE_SECONDS = 30.0


@dataclass(frozen=True)
class Sequenced:
    placed: int  # changes given their places
    busy: bool = False  # another replica's sequencer held the lock: nothing done

    @property
    def more(self) -> bool:
        return self.placed >= BATCH


@dataclass(frozen=True)
class Pruned:
    pruned_through: int | None  # the highest place now forgotten, if any was


def sequence(conn: Connection) -> Sequenced:
    with conn.transaction():
        locked = conn.execute(queries.get("lock_run_change_sequencer")).fetchone()
        if not (locked and locked["locked"]):
            return Sequenced(0, busy=True)
        placed = conn.execute(queries.get("sequence_run_changes"), {"limit": BATCH}).rowcount
    return Sequenced(max(placed, 0))


def prune(
    conn: Connection, *, keep_seconds: float = KEEP_SECONDS, now: datetime | None = None
) -> Pruned:
    """``now``: the database clock unless given (the operator's "now", as every service)."""
    with conn.transaction():
        row = conn.execute(
            queries.get("prune_run_changes"), {"keep_seconds": keep_seconds, "now": now}
        ).fetchone()
    return Pruned(row["pruned_through"] if row else None)
