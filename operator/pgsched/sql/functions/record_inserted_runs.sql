-- Trigger: inserted runs go to the outbox the publisher reads.

CREATE OR REPLACE FUNCTION pgsched.record_inserted_runs() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO pgsched.run_events
        (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger, n.scheduled_for
    FROM new_rows AS n;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.record_inserted_runs() FROM PUBLIC;
