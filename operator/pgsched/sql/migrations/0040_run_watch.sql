-- Watching runs through the Run API (`kubectl get runs -w`, docs/runs-api.md): every change
-- the run_events outbox records is also kept a while in run_changes, in an order a watch can
-- resume from.
--
-- The order is not the order of the writers' transactions: a transaction that recorded a
-- change first may commit last, and a watcher that had seen a later one would skip it on
-- resuming. So a change gets its place (`seq`) only after it committed, from one sequencer
-- at a time (`sequence_run_changes` in queries/runs_api.sql, under an advisory lock): every
-- change a sequencer sees is committed, and any change it does not see gets a later seq
-- from the next sequencer. Once a watcher has seen seq s, every change below s is visible.
-- A resourceVersion is a seq. Changes older than the retention are pruned, and
-- `run_change_horizon` remembers the highest seq pruned: a watch from below it
-- answers 410 Gone, as the API server does for a compacted revision.

CREATE SEQUENCE pgsched.run_change_seq AS bigint;

CREATE TABLE pgsched.run_changes (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        bigint      NOT NULL,
    definition_id uuid        NOT NULL,
    status        text        NOT NULL,  -- what the change made it (or a note: run_events)
    reason        text,
    created       boolean     NOT NULL,  -- the run was inserted by the change's transaction
    at            timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    seq           bigint      UNIQUE     -- its place in the watch order, once sequenced
);

CREATE INDEX run_changes_unsequenced ON pgsched.run_changes (id) WHERE seq IS NULL;
CREATE INDEX run_changes_by_age ON pgsched.run_changes (at);

CREATE TABLE pgsched.run_change_horizon (
    only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    pruned_through bigint  NOT NULL
);

INSERT INTO pgsched.run_change_horizon (pruned_through) VALUES (0);

REVOKE ALL ON TABLE pgsched.run_changes, pgsched.run_change_horizon FROM PUBLIC;
REVOKE ALL ON SEQUENCE pgsched.run_change_seq FROM PUBLIC;

-- The trigger that fills run_changes, and its function, are kept in
-- functions/record_run_changes.sql (applied after the numbered migrations).
