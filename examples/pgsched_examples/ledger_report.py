"""``ledger-report``: a read-only job kind that reports balances per account.

Read-only kinds declare nothing special: not ``mutating``, no compensation. Cancelled
between two accounts, the report just stops — there is nothing to undo — and the run
ends ``CANCELLED``. The session is put in read-only mode, so the declaration is enforced by
the database rather than trusted.
"""

from __future__ import annotations

import time

import psycopg

from pgsched import sdk
from pgsched_examples import connect

ACCOUNTS = """
SELECT DISTINCT account FROM pgsched_examples.ledger_entries
WHERE source = %(source)s ORDER BY account
"""
BALANCE = """
SELECT count(*) AS entries, coalesce(sum(amount_cents), 0) AS balance_cents
FROM pgsched_examples.ledger_entries
WHERE source = %(source)s AND account = %(account)s
"""


@sdk.job("ledger-report", retry_on=(psycopg.OperationalError,))
def ledger_report(ctx: sdk.JobContext, *, source: str, pause_seconds: float = 0.0) -> None:
    """Log one line per account of ``source``, then the total."""
    with connect() as conn:
        conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        accounts = [row["account"] for row in conn.execute(ACCOUNTS, {"source": source})]
        total = 0
        for account in accounts:
            ctx.checkpoint()
            row = conn.execute(BALANCE, {"source": source, "account": account}).fetchone()
            assert row is not None
            total += row["balance_cents"]
            ctx.logger.info(
                "%s: %s entries, balance %.2f", account, row["entries"], row["balance_cents"] / 100
            )
            if pause_seconds:
                time.sleep(pause_seconds)
    ctx.logger.info("%s: %s accounts, total balance %.2f", source, len(accounts), total / 100)
