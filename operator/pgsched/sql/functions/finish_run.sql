-- The job role's finish: the fenced write first and, only when it found nothing, the
-- re-establishment of a lost claim and the write again. The signature with a trailing
-- `at` is the previous release's pods'.

CREATE OR REPLACE FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text DEFAULT NULL::text, final_error text DEFAULT NULL::text, final_exit_code integer DEFAULT NULL::integer, final_retry_hint text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $_$
BEGIN
    IF final_reason IS NOT NULL AND final_reason !~ '^[A-Za-z][A-Za-z0-9_.]{0,63}$' THEN
        RAISE EXCEPTION 'finish_run: reason % is not a short identifier',
            pg_catalog.quote_literal(pg_catalog.left(final_reason, 80))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a letter, then up to 63 letters, digits, "_" or "."'
                         ' (example: NonZeroExit)';
    END IF;
    IF final_exit_code IS NOT NULL AND final_exit_code NOT BETWEEN 0 AND 255 THEN
        RAISE EXCEPTION 'finish_run: exit code % is out of range 0..255', final_exit_code
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: 1';
    END IF;
    IF final_retry_hint IS NOT NULL AND final_retry_hint NOT IN ('retry', 'never') THEN
        RAISE EXCEPTION 'finish_run: retry hint % is not retry or never',
            pg_catalog.quote_literal(pg_catalog.left(final_retry_hint, 80))
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: never';
    END IF;
    -- clock_timestamp(), not now(): a claim that waited for this commit must see a
    -- finished_at earlier than its own started_at, or run intervals would seem to overlap.
    FOR attempt IN 1..2 LOOP
        IF pgsched.finish_run_pinned(run_id, lease, final_status, final_reason, final_error,
                                     final_exit_code, final_retry_hint,
                                     pg_catalog.clock_timestamp()) THEN
            RETURN true;
        END IF;
        EXIT WHEN attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN false;
END;
$_$;

CREATE OR REPLACE FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text, ignored_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pgsched.finish_run(run_id, lease, final_status, final_reason, final_error,
                              final_exit_code, final_retry_hint);
$$;

REVOKE ALL ON FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text, ignored_at timestamp with time zone) FROM PUBLIC;

-- pgsched_job is missing where the migrating role may not create roles.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text) TO pgsched_job;
        GRANT EXECUTE ON FUNCTION pgsched.finish_run(run_id bigint, lease uuid, final_status text, final_reason text, final_error text, final_exit_code integer, final_retry_hint text, ignored_at timestamp with time zone) TO pgsched_job;
    END IF;
END;
$$;
