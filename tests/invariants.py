"""Invariant checks over the database, shared by race, fault and chaos tests.

Each function returns a list of human-readable violations (empty means the invariant
holds), so a failing test prints exactly what went wrong.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from pgsched.db.connection import Connection


def no_double_launch(launched: Iterable[int]) -> list[str]:
    """I1: every claimed run was launched by exactly one claimer."""
    counts = Counter(launched)
    return [f"run {run_id} launched {count} times" for run_id, count in counts.items() if count > 1]


def no_duplicate_occurrence(conn: Connection) -> list[str]:
    """I1: no (definition, scheduled_for) occurrence materialized twice."""
    rows = conn.execute(
        "SELECT definition_id, scheduled_for, count(*) AS n FROM pgsched.job_runs"
        " WHERE trigger = 'schedule' GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()
    return [
        f"occurrence {row['scheduled_for']} of {row['definition_id']} materialized {row['n']} times"
        for row in rows
    ]


def never_over_cap(conn: Connection) -> list[str]:
    """I2 from the recorded intervals: sweep every definition's [started_at, finished_at).

    started_at and finished_at come from clock_timestamp() taken after the claim's locks and
    before the finish's commit, so a run that made room always ended before its successor
    started; at equal timestamps the start is counted first (the strict reading).
    """
    rows = conn.execute(
        "SELECT r.definition_id, r.started_at, coalesce(r.finished_at, 'infinity') AS finished_at,"
        " d.max_concurrent_runs AS cap"
        " FROM pgsched.job_runs r JOIN pgsched.job_definitions d ON d.id = r.definition_id"
        " WHERE r.started_at IS NOT NULL"
    ).fetchall()
    events: dict[object, list[tuple[object, int]]] = defaultdict(list)
    caps = {}
    for row in rows:
        events[row["definition_id"]].append((row["started_at"], 1))
        events[row["definition_id"]].append((row["finished_at"], -1))
        caps[row["definition_id"]] = row["cap"]
    problems = []
    for definition_id, items in events.items():
        running = peak = 0
        for _, delta in sorted(items, key=lambda item: (item[0], -item[1])):
            running += delta
            peak = max(peak, running)
        if peak > caps[definition_id]:
            problems.append(
                f"definition {definition_id} reached {peak} running, cap {caps[definition_id]}"
            )
    return problems


def every_attempt_terminal(conn: Connection) -> list[str]:
    """I3: nothing left behind."""
    rows = conn.execute(
        "SELECT status, count(*) AS n FROM pgsched.job_runs"
        " WHERE status IN ('QUEUED', 'RUNNING') GROUP BY status"
    ).fetchall()
    return [f"{row['n']} runs still {row['status']}" for row in rows]
