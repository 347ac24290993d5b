-- A run-now request's lock: one token of one definition at a time. Every run queued for a
-- request is created under it (queries/runs.sql, enqueue_manual) and so is a lost one
-- restored (restore_lost_run), so each sees the other's run: no unique key on the token
-- can span job_runs' partitions.

CREATE OR REPLACE FUNCTION pgsched.lock_request(definition_id uuid, token text) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('request:' || definition_id::text || ':' || token, 0));
$$;

REVOKE ALL ON FUNCTION pgsched.lock_request(definition_id uuid, token text) FROM PUBLIC;
