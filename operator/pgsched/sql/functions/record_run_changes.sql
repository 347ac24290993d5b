-- Trigger: what goes to the run_events outbox is also kept for watches of runs (migration
-- 0040). A change is the run's creation when the run was inserted by the same transaction
-- (its created_at is the transaction's now()): a watch sends it as ADDED, others as
-- MODIFIED. The run is found in its own partition (scheduled_for is the partition key).

CREATE OR REPLACE FUNCTION pgsched.record_run_changes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO pgsched.run_changes (run_id, definition_id, status, reason, created, previous_status)
    SELECT n.run_id, n.definition_id, n.status, n.reason,
           coalesce((SELECT r.created_at = now() FROM pgsched.job_runs AS r
                     WHERE r.id = n.run_id AND r.scheduled_for = n.scheduled_for), false),
           n.previous_status
    FROM new_rows AS n
    ORDER BY n.id;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.record_run_changes() FROM PUBLIC;

-- Attached here, not in a numbered migration (those never name a kept function): replaced
-- as a whole whenever this file is applied again.
CREATE OR REPLACE TRIGGER run_events_watched
    AFTER INSERT ON pgsched.run_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.record_run_changes();
