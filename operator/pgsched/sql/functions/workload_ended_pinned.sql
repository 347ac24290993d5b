-- The owner-only note that a run's workload ended. A run whose cancellation was requested
-- ends CANCELLED at once (its outcome is decided however the pod exited); any other run
-- waits for its Job's verdict.

CREATE OR REPLACE FUNCTION pgsched.workload_ended_pinned(run_id bigint, lease uuid, at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    stopped boolean;
BEGIN
    UPDATE pgsched.job_runs
    SET workload_ended_at = coalesce(workload_ended_at, at)
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease
    RETURNING cancel_requested
              AND (cancel_requested_at IS NULL OR cancel_requested_at < workload_ended_at)
    INTO stopped;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF stopped THEN
        PERFORM pgsched.finish_run_pinned(
            run_id, lease, 'CANCELLED', 'Cancelled',
            'stopped after cancellation was requested (its workload ended)', NULL, NULL, at
        );
    END IF;
    RETURN true;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.workload_ended_pinned(run_id bigint, lease uuid, at timestamp with time zone) FROM PUBLIC;
