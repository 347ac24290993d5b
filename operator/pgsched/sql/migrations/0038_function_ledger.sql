-- The ledger of function files.
--
-- Every function of the schema is now kept whole in one file of sql/functions, which
-- `pgsched migrate` applies after the numbered migrations, under the same lock, whenever
-- the file's checksum differs from the one recorded here (docs/architecture.md,
-- "Migrations"). The numbered migrations keep tables, types and data.

CREATE TABLE pgsched.schema_functions (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
