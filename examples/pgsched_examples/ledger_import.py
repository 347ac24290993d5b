"""``ledger-import``: a mutating job kind that writes in batches and compensates on cancel.

Each batch is one transaction: its entries and a row in ``import_batches`` commit together,
so at any checkpoint the database holds whole batches only. When the run is cancelled
(or its lease is lost, or the pod is stopped) the next checkpoint raises, and
:func:`undo_import` removes this run's entries and marks its batches ``compensated``, in
one transaction — a cancelled import leaves no half-imported ledger behind, and the batch
table keeps the trail of what was written and undone.

Retries: a dropped connection or a cancelled statement (``psycopg.OperationalError``) is
worth another attempt — and the import is idempotent per ``(source, seq)``, so a retry
skips what an earlier attempt committed. A full disk (``DiskFull``, itself an
``OperationalError``) is not: it will not empty itself, and ``never_retry_on`` wins over
``retry_on`` even for a subclass.
"""

from __future__ import annotations

import time

import psycopg

from pgsched import sdk
from pgsched_examples import connect, ensure_schema

INSERT_ENTRY = """
INSERT INTO pgsched_examples.ledger_entries (source, seq, run_id, account, amount_cents)
VALUES (%(source)s, %(seq)s, %(run_id)s, %(account)s, %(amount_cents)s)
ON CONFLICT (source, seq) DO NOTHING
"""
INSERT_BATCH = """
INSERT INTO pgsched_examples.import_batches (run_id, batch, source, entries)
VALUES (%(run_id)s, %(batch)s, %(source)s, %(entries)s)
"""
UNDO_ENTRIES = "DELETE FROM pgsched_examples.ledger_entries WHERE run_id = %(run_id)s"
MARK_COMPENSATED = """
UPDATE pgsched_examples.import_batches
SET status = 'compensated', compensated_at = now()
WHERE run_id = %(run_id)s AND status = 'imported'
"""


def undo_import(ctx: sdk.JobContext, cancelled: sdk.Cancelled) -> None:
    """Compensation: remove this run's entries, keep its batches as a marked trail."""
    with connect() as conn, conn.transaction():
        removed = conn.execute(UNDO_ENTRIES, {"run_id": ctx.run_id}).rowcount
        batches = conn.execute(MARK_COMPENSATED, {"run_id": ctx.run_id}).rowcount
    ctx.logger.info(
        "compensated (%s): removed %s entries of %s batches", cancelled.cause, removed, batches
    )


@sdk.job(
    "ledger-import",
    mutating=True,
    retry_on=(psycopg.OperationalError,),
    never_retry_on=(psycopg.errors.DiskFull,),
    compensate=undo_import,
)
def ledger_import(
    ctx: sdk.JobContext,
    *,
    source: str,
    total: int,
    batch_size: int = 100,
    accounts: int = 10,
    pause_seconds: float = 0.0,
) -> None:
    """Import ``total`` synthetic entries of ``source`` in batches of ``batch_size``."""
    if total < 0 or batch_size < 1 or accounts < 1:
        raise ValueError(
            f"need total >= 0, batch_size >= 1 and accounts >= 1; got total={total},"
            f" batch_size={batch_size}, accounts={accounts}"
        )
    with connect() as conn:
        ensure_schema(conn)
        for batch, start in enumerate(range(0, total, batch_size)):
            ctx.checkpoint()  # between batches: a cancelled run stops on a batch boundary
            entries = [
                {
                    "source": source,
                    "seq": seq,
                    "run_id": ctx.run_id,
                    "account": f"acct-{seq % accounts:03d}",
                    "amount_cents": (seq * 7919) % 10_000 - 5_000,
                }
                for seq in range(start, min(start + batch_size, total))
            ]
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(INSERT_ENTRY, entries)
                cursor.execute(
                    INSERT_BATCH,
                    {
                        "run_id": ctx.run_id,
                        "batch": batch,
                        "source": source,
                        "entries": len(entries),
                    },
                )
            ctx.logger.info("batch %s: %s entries imported", batch, len(entries))
            if pause_seconds:
                time.sleep(pause_seconds)  # throttling, so the import never hogs the database
    ctx.logger.info("imported %s entries of %s", total, source)
