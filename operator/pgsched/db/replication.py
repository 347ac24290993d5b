"""What replication the database runs on, and what a failover of it would lose.

pgsched keeps every promise in the commits of one primary. Whether those commits survive a
failover is the replication's business: with a **synchronous** standby
(``synchronous_standby_names``, ``synchronous_commit`` at least ``on``) nothing acknowledged
is lost; with **asynchronous** standbys a failover loses the commits they had not received,
acknowledged requests included; a single server has nothing to fail over to. ``pgsched
doctor`` reports which, with the settings to change; the operator warns at start-up.

With asynchronous replication the operator still keeps what it was asked through the API
server: a request annotation is removed only once every connected streaming standby has
flushed the commit that carried it out (:func:`progress`, :meth:`Progress.flushed`). Seeing
the standbys' positions takes ``pg_read_all_stats`` (or ``pg_monitor``).

Why and what it costs: docs/operations.md, "What a failover can lose" and "Requests are
kept until the standbys have them".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pgsched.db import queries
from pgsched.db.connection import Connection

Mode = Literal["synchronous", "asynchronous", "single", "weakened"]

# synchronous_commit values that wait for a synchronous standby.
_WAITS_FOR_STANDBY = ("on", "remote_write", "remote_apply")

SYNCHRONOUS_SETTINGS = (
    "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'; SELECT pg_reload_conf();"
    " (or your HA manager's equivalent: Patroni synchronous_mode: true, CloudNativePG"
    " spec.postgresql.synchronous, a managed service's synchronous/zone-redundant option)"
)


@dataclass(frozen=True)
class Replication:
    mode: Mode
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: int
    timeline: int

    @property
    def detail(self) -> str:
        settings = (
            f"synchronous_standby_names = '{self.synchronous_standby_names}',"
            f" synchronous_commit = {self.synchronous_commit}, timeline {self.timeline}"
        )
        if self.mode == "synchronous":
            waiting = "" if self.standbys else "; no standby is connected now: commits wait for one"
            return (
                f"synchronous ({settings}): a commit is acknowledged once a standby has it,"
                f" so a failover loses nothing pgsched acknowledged{waiting}"
            )
        if self.mode == "weakened":
            return (
                f"synchronous standbys are configured but pgsched's sessions do not wait for"
                f" them ({settings}): set it back, e.g. ALTER ROLE <pgsched role> SET"
                " synchronous_commit = on"
            )
        if self.mode == "asynchronous":
            return (
                f"asynchronous replication to {self.standbys} standby(s) ({settings}): a"
                " failover can lose the last commits — acknowledged run-now requests,"
                " cancels and outcomes (see docs/operations.md, Failover). To make"
                f" failovers lossless: {SYNCHRONOUS_SETTINGS}"
            )
        return f"no streaming standby connected ({settings}): nothing to fail over to"


@dataclass(frozen=True)
class Position:
    """Where this server's WAL went up to, on which timeline: taken after a commit, a
    position past its end."""

    timeline: int
    lsn: int  # bytes since 0/0


@dataclass(frozen=True)
class Progress:
    """How far this server's connected streaming standbys have flushed its WAL."""

    position: Position  # now
    least_flushed: int | None  # None: no standby connected (or none whose position shows)
    unseen: int  # standbys whose position this role may not see (no pg_read_all_stats)

    def flushed(self, position: Position) -> bool:
        """Whether a failover to any connected standby keeps the commits up to
        ``position``: every standby flushed that far. With none connected the commits are
        as durable as they can be (there is nothing to fail over to). A position of
        another timeline is never flushed here: a failover came between, and the commits
        after the standby's last one are gone or were never this server's."""
        return position.timeline == self.position.timeline and (
            self.least_flushed is None or self.least_flushed >= position.lsn
        )


def blind_to_standbys(conn: Connection) -> str | None:
    """What to say when standbys are connected whose positions this role may not see:
    then requests are removed as soon as they are carried out (None: it sees them all)."""
    unseen = progress(conn).unseen
    if not unseen:
        return None
    return (
        f"{unseen} streaming standby(s) connected whose flushed position this role may not"
        " see (it is not a member of pg_read_all_stats): request annotations are removed as"
        " soon as they are carried out, so a failover can lose them (docs/operations.md,"
        " Failover). To keep each until the standbys have it: GRANT pg_read_all_stats TO"
        f" {conn.info.user}"
    )


def progress(conn: Connection) -> Progress:
    row = conn.execute(queries.get("replication_progress")).fetchone()
    assert row is not None
    least = row["least_flushed"]
    return Progress(
        Position(int(row["timeline"]), int(row["position"])),
        None if least is None else int(least),
        int(row["unseen"]),
    )


def inspect(conn: Connection) -> Replication:
    row = conn.execute(queries.get("replication_state")).fetchone()
    assert row is not None
    names = str(row["synchronous_standby_names"] or "").strip()
    commit = str(row["synchronous_commit"])
    mode: Mode
    if names and commit in _WAITS_FOR_STANDBY:
        mode = "synchronous"
    elif names:
        mode = "weakened"
    elif row["standbys"]:
        mode = "asynchronous"
    else:
        mode = "single"
    return Replication(mode, names, commit, int(row["standbys"]), int(row["timeline"]))
