"""Example job kinds for the pgsched SDK, used by the tests and the quickstart.

- ``ledger_import`` — ``ledger-import``, a *mutating* kind: imports ledger entries in
  batches, calls ``ctx.checkpoint()`` between batches and compensates a cancelled run;
- ``ledger_report`` — ``ledger-report``, a *read-only* kind: summarizes the entries per
  account, one checkpoint per account.

Run them with ``PGSCHED_JOB_MODULES=pgsched_examples.ledger_import,pgsched_examples.ledger_report``
(this directory on ``PYTHONPATH``). They keep their data in the ``pgsched_examples`` schema
of the database named by ``PGSCHED_EXAMPLES_DSN``; when that is unset they use
``PGSCHED_DSN``, which is fine for a local run and absent from pods: pgsched gives them no
database connection (they talk to the operator's run API) — your jobs bring their own
credentials.
"""

from __future__ import annotations

import os

import psycopg
from psycopg.rows import DictRow, dict_row

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS pgsched_examples;

-- One row per committed batch of an import run: what compensation must undo.
CREATE TABLE IF NOT EXISTS pgsched_examples.import_batches (
    run_id          bigint      NOT NULL,
    batch           integer     NOT NULL,
    source          text        NOT NULL,
    entries         integer     NOT NULL,
    status          text        NOT NULL DEFAULT 'imported'
                                CHECK (status IN ('imported', 'compensated')),
    imported_at     timestamptz NOT NULL DEFAULT now(),
    compensated_at  timestamptz,
    PRIMARY KEY (run_id, batch)
);

-- The imported data. (source, seq) makes a re-run idempotent; run_id says who wrote it.
CREATE TABLE IF NOT EXISTS pgsched_examples.ledger_entries (
    source        text    NOT NULL,
    seq           integer NOT NULL,
    run_id        bigint  NOT NULL,
    account       text    NOT NULL,
    amount_cents  bigint  NOT NULL,
    PRIMARY KEY (source, seq)
);
"""


def connect() -> psycopg.Connection[DictRow]:
    dsn = os.environ.get("PGSCHED_EXAMPLES_DSN") or os.environ["PGSCHED_DSN"]
    return psycopg.connect(
        dsn, autocommit=True, row_factory=dict_row, application_name="pgsched-examples"
    )


def ensure_schema(conn: psycopg.Connection[DictRow]) -> None:
    """Create the example tables once; concurrent first runs serialize on a lock."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgsched_examples:schema'))")
        conn.execute(SCHEMA)
