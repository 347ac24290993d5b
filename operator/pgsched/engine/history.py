"""Run history partitions: months created ahead, expired months dropped whole.

``job_runs`` is partitioned by UTC month of ``scheduled_for``. Each round (one replica at
a time, under an advisory lock) this service creates the coming months' partitions,
drops the months that ended more than the retention ago (``PGSCHED_HISTORY_RETENTION``)
whole, and prunes the default partition, so history expires without DELETE or vacuum
debt. A month still holding an unsettled run is kept, and no lock on ``job_runs`` is
waited for longer than ``LOCK_WAIT``, so claims never queue behind it; what could not be
done is tried again next round.

What each step locks, and what happens to rows that name a dropped run:
docs/architecture.md, "History partitions".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pgsched.db import clock, queries
from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

MONTHS_AHEAD = 2
INTERVAL_SECONDS = 300.0
LOCK_WAIT = timedelta(milliseconds=200)
PRUNE_BATCH = 10_000


@dataclass
class HistoryResult:
    created: list[str] = field(default_factory=list)
    moved: int = 0  # rows moved out of the default partition into a new month
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # expired, but live rows or busy
    busy: list[str] = field(default_factory=list)  # not created: the lock did not come
    pruned: int = 0  # rows deleted from the default partition
    skipped: bool = False  # another replica held the lock


def partition_name(month: datetime) -> str:
    return f"job_runs_y{month.year:04d}m{month.month:02d}"


def month_of(name: str) -> datetime:
    """The first instant of the month a partition name names (``job_runs_y2026m12``)."""
    return datetime(int(name[10:14]), int(name[15:17]), 1, tzinfo=UTC)


def add_months(month: datetime, count: int) -> datetime:
    index = month.year * 12 + month.month - 1 + count
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def run_once(
    conn: Connection, *, retention: timedelta | None, now: datetime | None = None
) -> HistoryResult:
    at = clock.now(conn, now).astimezone(UTC)  # the database's clock, as the tick's
    result = HistoryResult()
    with conn.transaction():
        if not _locked(conn):
            result.skipped = True
            return result
        # Creating a month locks job_runs, which every claim reads: wait for it no longer
        # than a drop does, or a long query would queue every claim behind us.
        conn.execute(queries.get("limit_lock_wait"), {"lock_wait": LOCK_WAIT})
        existing = {row["name"] for row in conn.execute(queries.get("run_partitions"))}
        this_month = datetime(at.year, at.month, 1, tzinfo=UTC)
        for ahead in range(MONTHS_AHEAD + 1):
            month = add_months(this_month, ahead)
            name = partition_name(month)
            if name in existing:
                continue
            try:
                with conn.transaction():  # a savepoint: a month that waited too long waits
                    moved = conn.execute(queries.get("create_run_partition"), {"month": month})
                    result.moved += int(_value(moved.fetchone(), "moved"))
            except psycopg.errors.LockNotAvailable:
                log.info("run history partition %s not created yet: %s", name, _KEPT["busy"])
                result.busy.append(name)
                continue
            result.created.append(name)
            log.info("created run history partition %s", name)
    before = None if retention is None else at - retention
    if before is not None and not _detach_expired(conn, existing, before, result):
        return result
    # Also with no retention (any more): a month detached before a crash is out of the
    # history already, and its table would otherwise stay on disk for good.
    if not _drop_detached(conn, result) or before is None:
        return result
    with conn.transaction():
        pruned = conn.execute(
            queries.get("prune_default_partition"), {"before": before, "limit": PRUNE_BATCH}
        )
        result.pruned = pruned.rowcount
    if result.pruned:
        _forget_rows_of_dropped_runs(conn)
    return result


def _detach_expired(
    conn: Connection, existing: set[str], before: datetime, result: HistoryResult
) -> bool:
    """Detach the months that ended before ``before``; False if another replica's round
    holds the history lock."""
    for name in sorted(existing):
        if add_months(month_of(name), 1) > before:
            break
        # One month a transaction: a kept one holds up no other.
        outcome = _outcome_if_locked(conn, "detach_run_partition", name)
        if outcome is None:
            result.skipped = True
            return False
        if outcome not in {"detached", "gone"}:
            log.info("kept expired partition %s: %s", name, _KEPT[outcome])
            result.kept.append(name)
    return True


def _drop_detached(conn: Connection, result: HistoryResult) -> bool:
    """Drop the detached months, each in a transaction of its own that locks only its
    table: removing gigabytes of files takes seconds, and a DROP inside the detach's
    transaction would hold job_runs' lock (every claim) until they were gone. False if
    another replica's round holds the history lock."""
    for row in conn.execute(queries.get("expired_run_months")).fetchall():
        outcome = _outcome_if_locked(conn, "drop_expired_run_month", row["name"])
        if outcome is None:
            result.skipped = True
            return False
        month = row["month"]
        if outcome == "dropped":
            log.info("dropped run history partition %s (older than the retention)", month)
            result.dropped.append(month)
        elif outcome == "busy":
            log.info("detached partition %s not dropped yet: %s", row["name"], _KEPT["busy"])
            result.kept.append(month)
    if result.dropped:
        _forget_rows_of_dropped_runs(conn)
    return True


def _forget_rows_of_dropped_runs(conn: Connection) -> None:
    """Their runs' starts (``run_starts``) and finish-by marks (``run_deadlines``) go with them."""
    for query in ("forget_starts_of_dropped_runs", "forget_deadlines_of_dropped_runs"):
        conn.execute(queries.get(query))


_KEPT = {
    "kept": "it still holds a QUEUED, RUNNING or unsettled run",
    "busy": f"its lock did not come within {LOCK_WAIT.total_seconds():g} s (trying again later)",
}


def _outcome_if_locked(conn: Connection, query: str, name: str) -> str | None:
    """``query``'s outcome for the table ``name``, in a transaction of its own under the
    history lock; None when another replica holds that lock (this round then stops, that
    replica's round goes on)."""
    with conn.transaction():
        if not _locked(conn):
            return None
        row = conn.execute(queries.get(query), {"name": name, "lock_wait": LOCK_WAIT})
        return str(_value(row.fetchone(), "outcome"))


def _locked(conn: Connection) -> bool:
    return bool(_value(conn.execute(queries.get("lock_history")).fetchone(), "locked"))


def _value(row: dict[str, Any] | None, key: str) -> Any:
    if row is None:
        raise RuntimeError(f"the history query returned no row (wanted {key})")
    return row[key]
