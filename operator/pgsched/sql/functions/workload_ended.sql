-- The heartbeat sidecar's note that the workload ended, as the job role calls it. The
-- signature with a trailing `at` is the previous release's pods'.

CREATE OR REPLACE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
BEGIN
    FOR attempt IN 1..2 LOOP
        IF pgsched.workload_ended_pinned(run_id, lease, pg_catalog.now()) THEN
            RETURN true;
        END IF;
        EXIT WHEN attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN false;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid, ignored_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pgsched.workload_ended(run_id, lease);
$$;

REVOKE ALL ON FUNCTION pgsched.workload_ended(run_id bigint, lease uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.workload_ended(run_id bigint, lease uuid, ignored_at timestamp with time zone) FROM PUBLIC;

-- pgsched_job is missing where the migrating role may not create roles.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.workload_ended(run_id bigint, lease uuid) TO pgsched_job;
        GRANT EXECUTE ON FUNCTION pgsched.workload_ended(run_id bigint, lease uuid, ignored_at timestamp with time zone) TO pgsched_job;
    END IF;
END;
$$;
