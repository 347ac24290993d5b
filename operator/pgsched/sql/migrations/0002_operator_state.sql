-- Operator state: an outbox of run status changes, and spec rejections per definition.
--
-- The outbox is written by triggers so that no code path can forget it.
--
-- Runs change state in many places: the tick (materialize, reap, settle, dispatch), the
-- job side (heartbeat sidecar, SDK runner), the operator's outcome watch, users
-- cancelling. The operator publishes what users should see (Kubernetes Events, the
-- ScheduledJob's status) from this one table, claiming rows with SKIP LOCKED so any
-- replica can publish without duplicates. Published rows are deleted; the run rows
-- themselves are the audit trail.
--
-- Statement-level triggers with transition tables: one INSERT ... SELECT per statement,
-- so a dispatch claiming fifty runs adds one statement, not fifty.

CREATE TABLE pgsched.run_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        bigint      NOT NULL,
    definition_id uuid        NOT NULL,
    status        text        NOT NULL,
    reason        text,
    attempt       integer     NOT NULL,
    trigger       text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION pgsched.record_inserted_runs() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO pgsched.run_events (run_id, definition_id, status, reason, attempt, trigger)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger
    FROM new_rows AS n;
    RETURN NULL;
END;
$$;

CREATE FUNCTION pgsched.record_run_status_changes() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO pgsched.run_events (run_id, definition_id, status, reason, attempt, trigger)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger
    FROM new_rows AS n
    JOIN old_rows AS o ON o.id = n.id
    WHERE o.status IS DISTINCT FROM n.status;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_runs_inserted
    AFTER INSERT ON pgsched.job_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.record_inserted_runs();

CREATE TRIGGER job_runs_status_changed
    AFTER UPDATE ON pgsched.job_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.record_run_status_changes();

-- The operator's view of the resource, so the ScheduledJob's status can be rendered from
-- the database alone by any replica: which generation was last rejected, and why. An
-- invalid update leaves the last valid definition in force (and says so in the status).
ALTER TABLE pgsched.job_definitions
    ADD COLUMN rejected_generation bigint,
    ADD COLUMN rejection           text;
