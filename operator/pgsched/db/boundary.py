"""What a job pod's database login could reach beyond its own run, as advice an admin can act on.

pgsched itself keeps the job role to its lease functions (the grants to ``pgsched_job``;
docs/security-database.md). What it cannot set is the database around it, so ``pgsched
doctor`` and the operator's start-up say when:

- ``public`` is writable by others (PostgreSQL 14's default, and databases upgraded from
  it): pgsched's own sessions never look there (their search_path is pinned), but any other
  application in the database would run what a tenant planted;
- the job role may call the advisory lock functions (managed services, where migrating
  could not revoke them): a job login could hold a key a run-now request, an apply
  with ``after`` or the history and resync rounds wait for or skip on (claims, pools and
  chaining lock rows of ``pgsched.claim_locks`` instead);
- a job login has no ``CONNECTION LIMIT``, ``statement_timeout`` or
  ``idle_in_transaction_session_timeout``: settings on the NOLOGIN group role are not
  inherited by its members' sessions, so they belong on each login.
"""

from __future__ import annotations

from pgsched.db import queries
from pgsched.db.connection import Connection

LOGIN_LIMITS = (
    "ALTER ROLE <login> CONNECTION LIMIT 5; ALTER ROLE <login> SET statement_timeout = '30s';"
    " ALTER ROLE <login> SET idle_in_transaction_session_timeout = '30s'"
)


def problems(conn: Connection) -> list[str]:
    """One sentence per gap in the boundary, each saying how to close it; [] when none."""
    row = conn.execute(queries.get("tenant_boundary")).fetchone()
    assert row is not None
    found = []
    if row["public_writable"]:
        found.append(
            "schema public is writable by other roles (PostgreSQL 14's default): a tenant could"
            " plant functions there for other applications of this database (pgsched's"
            " sessions never search it); fix: REVOKE CREATE ON SCHEMA public FROM PUBLIC"
        )
    if row["job_advisory_locks"]:
        found.append(
            "the job role may take advisory locks: a job login could hold a key that"
            " run-now requests of one token, applies with `after` in a namespace, or the"
            " history and resync rounds wait for or skip on (claims, pools and chaining no"
            " longer use advisory keys); as a superuser run `pgsched migrate` again, or see"
            ' docs/operations.md, "Advisory locks on managed services"'
        )
    if row["unlimited_logins"]:
        found.append(
            f"job login(s) {', '.join(row['unlimited_logins'])} lack a connection limit,"
            " statement_timeout or idle_in_transaction_session_timeout (settings of the"
            f" pgsched_job group are not inherited); fix: {LOGIN_LIMITS}"
        )
    return found
