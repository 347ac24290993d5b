-- The operator's (owner-only) heartbeat, with a pinned time.

CREATE OR REPLACE FUNCTION pgsched.heartbeat_pinned(run_id bigint, lease uuid, at timestamp with time zone) RETURNS text
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH beat AS (
        UPDATE pgsched.job_runs
        SET heartbeat_at = at
        WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease
        RETURNING cancel_requested
    )
    SELECT coalesce((SELECT CASE WHEN cancel_requested THEN 'cancel_requested' ELSE 'active' END
                     FROM beat), 'lost');
$$;

REVOKE ALL ON FUNCTION pgsched.heartbeat_pinned(run_id bigint, lease uuid, at timestamp with time zone) FROM PUBLIC;
