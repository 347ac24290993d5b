-- Trigger: runs' status changes go to the outbox the publisher reads, each with the status
-- it left (`previous_status`: a watch of runs by phase needs it).

CREATE OR REPLACE FUNCTION pgsched.record_run_status_changes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO pgsched.run_events
        (run_id, definition_id, status, reason, attempt, trigger, scheduled_for, previous_status)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger, n.scheduled_for,
           o.status
    FROM new_rows AS n
    JOIN old_rows AS o ON o.id = n.id
    WHERE o.status IS DISTINCT FROM n.status;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.record_run_status_changes() FROM PUBLIC;
