"""Putting realistic rows in place fast: definitions, due runs, months of finished history.

Definitions are a mix of cron (several zones, ``H`` hashing, macros), RRULE and one-shot
schedules. Their ``next_run_at`` is computed by the engine's own schedule code, so it is a
real occurrence: "due" definitions each have exactly one occurrence in the last hour
(every recurring schedule in the mix fires at least hourly), "idle" ones have none for
the next hour. Runs and history are pure SQL (``bench/sql/seed.sql``).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

from bench import queries
from pgsched import schedule
from pgsched.db import clock
from pgsched.db.connection import Connection

# (kind, schedule text, zone): every recurring one fires at least hourly.
MIX: tuple[tuple[str, str, str], ...] = (
    ("cron", "*/5 * * * *", "UTC"),
    ("cron", "H * * * *", "Europe/Sofia"),
    ("cron", "@hourly", "America/New_York"),
    ("cron", "*/15 * * * *", "Asia/Tokyo"),
    ("cron", "H/20 * * * *", "Europe/Berlin"),
    ("cron", "7,37 * * * *", "Australia/Sydney"),
    ("rrule", "FREQ=HOURLY;BYMINUTE=7", "Europe/Sofia"),
    ("rrule", "FREQ=MINUTELY;INTERVAL=20", "America/Chicago"),
    ("cron", "*/10 * * * *", "America/Sao_Paulo"),
    ("once", "", "UTC"),  # text filled in per seeding: a one-shot at the chosen instant
)
HISTORY_CHUNK = 200_000


def definitions(
    conn: Connection,
    *,
    count: int,
    cap: int,
    due: bool,
    kinds: tuple[str, ...] = ("cron", "rrule", "once"),
    age: timedelta = timedelta(days=30),
    first: int = 0,
) -> datetime:
    """Insert ``count`` definitions with ``max_concurrent_runs = cap``, due now or idle.

    ``first`` is the number of the first one's name (``def-<n>``): a database can be grown
    in steps (the idle tick's curve).

    ``kinds`` narrows the mix; ``age`` is how long ago they were created (an RRULE's
    DTSTART day when its text gives none — which matters, see the materialize benchmark).
    Returns the database's "now" the occurrences were computed against: materializing
    at that instant finds exactly one due occurrence per due definition, however long
    the seeding took.
    """
    now = clock.now(conn)
    anchor = now - age
    mix = [entry for entry in MIX if entry[0] in kinds]
    # Due: the latest occurrence within the last hour. Idle: the first one after an hour.
    after = now - timedelta(hours=1) if due else now + timedelta(hours=1)
    once_at = (now - timedelta(seconds=10)) if due else (now + timedelta(days=2))
    columns: dict[str, list[object]] = {
        "names": [],
        "kinds": [],
        "schedules": [],
        "zones": [],
        "next_run_at": [],
    }
    for n in range(first, first + count):
        kind, text, zone = mix[n % len(mix)]
        name = f"def-{n}"
        if kind == "once":
            text = once_at.replace(microsecond=0, tzinfo=None).isoformat()
            zone = "UTC"
        # Only cron's H field depends on the definition; everything else is computed once.
        seed = f"bench/{name}" if kind == "cron" and "H" in text else ""
        next_at = _next_at(kind, text, zone, seed, anchor, after, now if due else None)
        columns["names"].append(name)
        columns["kinds"].append(kind)
        columns["schedules"].append(text)
        columns["zones"].append(zone)
        columns["next_run_at"].append(next_at)
    conn.execute(queries.get("seed_definitions"), {**columns, "cap": cap, "anchor": anchor})
    return now


@functools.cache
def _next_at(
    kind: str,
    text: str,
    zone: str,
    seed: str,
    anchor: datetime,
    after: datetime,
    not_after: datetime | None,
) -> datetime:
    stream = schedule.build(kind, text, zone=zone, hash_seed=seed, anchor=anchor)  # type: ignore[arg-type]
    found: datetime | None = None
    for occurrence in stream.occurrences_after(after - timedelta(microseconds=1)):
        if not_after is not None and occurrence.at > not_after:
            break
        found = occurrence.at
        if not_after is None:
            break
    if found is None and kind == "once":
        found = datetime.fromisoformat(text).replace(tzinfo=after.tzinfo)
    assert found is not None, f"{kind} {text!r} has no occurrence where the benchmark needs one"
    return found


def set_caps(conn: Connection, cap: int) -> None:
    conn.execute(queries.get("set_caps"), {"cap": cap})


def set_pools(conn: Connection, pools: int, limit: int) -> None:
    """Put the bench definitions into ``pools`` concurrency pools of ``limit`` (0: none)."""
    params = {"pools": pools, "limit": limit}
    for name in ("clear_pools", "seed_pools", "set_pools"):
        conn.execute(queries.get(name), params)
    conn.execute("ANALYZE pgsched.job_definitions")


def queued(conn: Connection, count: int) -> None:
    """``count`` due QUEUED runs spread at random over the bench definitions."""
    conn.execute(queries.get("seed_queued"), {"count": count})


def history(conn: Connection, count: int, *, start: int = 1) -> None:
    """``count`` finished (settled) runs, in chunks so a 1M-row load shows progress;
    ``start`` numbers the first (a history grown in steps continues the numbering)."""
    end = start + count - 1
    for first in range(start, end + 1, HISTORY_CHUNK):
        last = min(end, first + HISTORY_CHUNK - 1)
        conn.execute(queries.get("seed_history"), {"first": first, "last": last})


def fresh_queue(conn: Connection, count: int) -> None:
    """Empty the runs table, queue ``count`` due runs, then VACUUM ANALYZE so every
    measurement starts from the same clean, analyzed state."""
    conn.execute(queries.get("truncate_runs"))
    queued(conn, count)
    conn.execute(queries.get("vacuum_analyze_runs"))
