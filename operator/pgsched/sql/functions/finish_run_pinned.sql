-- The operator's (owner-only) finish, with a pinned time: it names the row's own lease.

CREATE OR REPLACE FUNCTION pgsched.finish_run_pinned(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text, at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF final_status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION 'finish_run: status % is not terminal (COMPLETED, FAILED or CANCELLED)',
            final_status USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgsched.job_runs
    SET status = final_status,
        reason = final_reason,
        error = pgsched.bounded_error(final_error),
        exit_code = final_exit_code,
        retry_hint = final_retry_hint,
        finished_at = at
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease;
    RETURN FOUND;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.finish_run_pinned(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text, at timestamp with time zone) FROM PUBLIC;
