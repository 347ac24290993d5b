-- Chaining: a ScheduledJob may run after others (spec.after), exactly once per final
-- upstream outcome, decided in the transaction that settles the upstream run.
--
-- 1. A chained run is a job_runs row with trigger 'upstream' and upstream_run_id naming
--    the upstream run whose final outcome queued it. The unique key on (downstream
--    definition, upstream run) is what makes it exactly once: a replayed settle, a
--    second leader or a crash between insert and commit can neither double nor lose it.
--    Retries of a chained run carry the same upstream_run_id (trigger 'retry'), so the
--    key is partial on the trigger.
ALTER TABLE pgsched.job_runs
    DROP CONSTRAINT job_runs_trigger_check,
    ADD CONSTRAINT job_runs_trigger_check
        CHECK (trigger IN ('schedule', 'manual', 'retry', 'backfill', 'upstream')),
    ADD COLUMN upstream_run_id bigint REFERENCES pgsched.job_runs (id);

CREATE UNIQUE INDEX job_runs_upstream_key ON pgsched.job_runs (definition_id, upstream_run_id)
    WHERE trigger = 'upstream';
-- "Which runs did this upstream run trigger?" (pgsched runs, describe, status).
CREATE INDEX job_runs_downstream ON pgsched.job_runs (upstream_run_id)
    WHERE upstream_run_id IS NOT NULL;

-- 2. A definition may have no schedule of its own ('none': it runs only when chained or
--    run by hand), and says how several upstreams combine (after_mode).
ALTER TABLE pgsched.job_definitions
    DROP CONSTRAINT job_definitions_schedule_kind_check,
    ADD CONSTRAINT job_definitions_schedule_kind_check
        CHECK (schedule_kind IN ('cron', 'rrule', 'once', 'none')),
    ADD COLUMN after_mode text NOT NULL DEFAULT 'Any' CHECK (after_mode IN ('Any', 'All'));

-- 3. The edges: downstream definition → upstream ScheduledJob *name* in the downstream's
--    namespace (an upstream may not exist yet, or be deleted and created again).
CREATE TABLE pgsched.job_dependencies (
    downstream_id uuid NOT NULL REFERENCES pgsched.job_definitions (id),
    upstream_name text NOT NULL,
    on_outcome    text NOT NULL CHECK (on_outcome IN ('Succeeded', 'Failed', 'Finished')),
    PRIMARY KEY (downstream_id, upstream_name)
);
CREATE INDEX job_dependencies_upstream ON pgsched.job_dependencies (upstream_name);

-- 4. Fan-in (after_mode 'All'): a final matching upstream run is an arrival; the
--    downstream runs once every upstream has an unconsumed arrival, and that run consumes
--    them all. One arrival per (downstream, upstream run), like the run key above.
CREATE TABLE pgsched.chain_arrivals (
    downstream_id   uuid   NOT NULL REFERENCES pgsched.job_definitions (id),
    upstream_name   text   NOT NULL,
    upstream_run_id bigint NOT NULL REFERENCES pgsched.job_runs (id),
    consumed_by     bigint REFERENCES pgsched.job_runs (id),
    PRIMARY KEY (downstream_id, upstream_run_id)
);
CREATE INDEX chain_arrivals_waiting ON pgsched.chain_arrivals (downstream_id, upstream_name)
    WHERE consumed_by IS NULL;

-- Settlers that chain into the same downstream serialize on a transaction-scoped advisory
-- lock per downstream, taken in ascending key order in one call (as dispatch does), so
-- the fan-in count is read after every earlier settle of that downstream committed.
CREATE FUNCTION pgsched.lock_chains(definition_ids uuid[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lock_key bigint;
BEGIN
    FOR lock_key IN
        SELECT DISTINCT hashtextextended('chain:' || d::text, 0)
        FROM unnest(definition_ids) AS d
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
END;
$$;
