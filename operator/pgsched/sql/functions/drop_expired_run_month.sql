-- Retention, second step: drop a detached month (see detach_run_partition). Its
-- transaction locks only the detached table, which no query on job_runs reads any more.

CREATE OR REPLACE FUNCTION pgsched.drop_expired_run_month(table_name text, lock_wait interval) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF table_name NOT LIKE 'expired\_job\_runs\_y%' THEN
        RAISE EXCEPTION 'drop_expired_run_month: % is not a detached month (expected a name like expired_job_runs_y2026m08)',
            table_name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_regclass(format('pgsched.%I', table_name)) IS NULL THEN
        RETURN 'gone';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms', true);
    BEGIN
        EXECUTE format('DROP TABLE pgsched.%I', table_name);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    RETURN 'dropped';
END;
$$;

REVOKE ALL ON FUNCTION pgsched.drop_expired_run_month(table_name text, lock_wait interval) FROM PUBLIC;
