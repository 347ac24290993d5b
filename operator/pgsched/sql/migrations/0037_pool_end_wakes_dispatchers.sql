-- A run's end also wakes the dispatchers when a run of another job in its pool waits.
--
-- 0035 woke the tick when the ended run's own job had a QUEUED run (Replace, Queue at
-- maxConcurrentRuns). A ConcurrencyPool's slot freed by one job is as often taken by
-- another job's run, which then waited up to a whole tick interval for the next tick.
-- Now the end notifies when any job of the same pool has a QUEUED run. Ends of jobs in no
-- pool cost one primary-key lookup more; the pool's members are found by the
-- job_definitions_pool index and their queued runs by (definition_id, status, id).

CREATE OR REPLACE FUNCTION pgsched.wake_dispatchers() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pgsched.job_runs AS q
        WHERE q.definition_id = NEW.definition_id AND q.status = 'QUEUED'
    ) OR EXISTS (
        SELECT 1
        FROM pgsched.job_definitions AS ended
        JOIN pgsched.job_definitions AS member
            ON member.pool = ended.pool AND member.id <> ended.id
        JOIN pgsched.job_runs AS q
            ON q.definition_id = member.id AND q.status = 'QUEUED'
        WHERE ended.id = NEW.definition_id AND ended.pool IS NOT NULL
    ) THEN
        PERFORM pg_notify(pgsched.dispatch_channel(), '');
    END IF;
    RETURN NULL;
END;
$$;
REVOKE ALL ON FUNCTION pgsched.wake_dispatchers() FROM PUBLIC;
