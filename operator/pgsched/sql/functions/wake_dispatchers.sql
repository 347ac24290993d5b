-- Trigger: a run's end wakes the dispatchers when a run of its job, or of another job in
-- its pool, waits (dispatch_channel).

CREATE OR REPLACE FUNCTION pgsched.wake_dispatchers() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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
