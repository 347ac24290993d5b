"""The primary of a multi-host DSN: never an old primary that came back writable.

libpq's ``target_session_attrs=read-write`` takes the *first* writable host of the list.
After a failover the old primary may come back writable before its HA manager demotes it
(a restart, a hand-rolled setup): then two listed hosts take writes, and the old one, if
listed first, gets every new session. A replica that ticked on the new timeline refuses
it (``engine.tick``), but a replica that starts afresh has no such memory.

It does not need one. Both servers are members of one cluster (the same system
identifier: a standby is a copy of its primary), and WAL timelines only grow: the
promoted standby writes on a newer timeline than the primary it replaced. So on connect,
when the DSN names several hosts, the others are asked too (each within a short connect
timeout); if another member takes writes on a newer timeline than the chosen host, the
chosen host is a former primary and the session goes to the newest one instead, with a
warning. Probing costs one short connection per other host, once per (re)connect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsched.db import connection, queries
from pgsched.db.connection import Connection

log = logging.getLogger(__name__)

# How long a probe of another listed host may take to connect.
PROBE_TIMEOUT_SECONDS = 2


@dataclass(frozen=True)
class Member:
    host: str
    port: str
    system_identifier: int
    writable: bool
    timeline: int | None


def hosts(dsn: str) -> list[tuple[str, str]]:
    """The (host, port) pairs a DSN lists (one port may serve every host)."""
    params = conninfo_to_dict(dsn)
    names = str(params.get("host") or "").split(",")
    ports = str(params.get("port") or "5432").split(",")
    if len(ports) == 1:
        ports = ports * len(names)
    return list(zip(names, ports, strict=False))


def single_host(dsn: str, host: str, port: str) -> str:
    """The DSN with only this host (everything else kept)."""
    params: dict[str, Any] = {**conninfo_to_dict(dsn), "host": host, "port": port}
    params.pop("hostaddr", None)
    return make_conninfo(**params)


def identify(conn: Connection) -> Member:
    row = conn.execute(queries.get("server_identity")).fetchone()
    assert row is not None
    return Member(
        host=str(conn.info.host),
        port=str(conn.info.port),
        system_identifier=int(row["system_identifier"]),
        writable=not row["in_recovery"],
        timeline=None if row["timeline"] is None else int(row["timeline"]),
    )


def newer_primary(
    dsn: str, chosen: Member, *, application_name: str, **kwargs: Any
) -> Member | None:
    """Another host of the DSN that takes writes for the same cluster on a newer timeline
    than ``chosen`` (the newest such), or None. Hosts that cannot be reached are skipped."""
    newest: Member | None = None
    for host, port in hosts(dsn):
        if (host, port) == (chosen.host, chosen.port):
            continue
        try:
            with connection.connect(
                single_host(dsn, host, port),
                application_name=f"{application_name}-probe",
                **{
                    **kwargs,
                    "connect_timeout": PROBE_TIMEOUT_SECONDS,
                    "answer_timeout": PROBE_TIMEOUT_SECONDS * 2,
                },
            ) as other:
                member = identify(other)
        except psycopg.Error as error:
            log.debug("probe of %s:%s failed: %s", host, port, error)
            continue
        if (
            member.writable
            and member.system_identifier == chosen.system_identifier
            and member.timeline is not None
            and (chosen.timeline is None or member.timeline > chosen.timeline)
            and (newest is None or member.timeline > (newest.timeline or 0))
        ):
            newest = member
    return newest


def connect(dsn: str, *, application_name: str, **kwargs: Any) -> Connection:
    """``connection.connect`` (same arguments), except that with several hosts in the DSN
    a former primary (writable, on an older timeline than another writable member) is
    passed over."""
    conn = connection.connect(dsn, application_name=application_name, **kwargs)
    if len(hosts(dsn)) < 2:
        return conn
    try:
        chosen = identify(conn)
        newest = newer_primary(dsn, chosen, application_name=application_name, **kwargs)
    except BaseException:
        conn.close()
        raise
    if newest is None:
        return conn
    conn.close()
    log.warning(
        "%s:%s takes writes on WAL timeline %s, but %s:%s of the same cluster is writable on"
        " timeline %s: a former primary that came back writable after a failover (split"
        " brain). Connecting to %s:%s instead; demote or stop the old primary, and prefer"
        " your HA manager's read-write endpoint to a multi-host DSN (docs/operations.md)",
        chosen.host,
        chosen.port,
        chosen.timeline,
        newest.host,
        newest.port,
        newest.timeline,
        newest.host,
        newest.port,
    )
    return connection.connect(
        single_host(dsn, newest.host, newest.port), application_name=application_name, **kwargs
    )
