-- The job role's heartbeat: the fenced write first and, only when it found nothing, the
-- re-establishment of a lost claim and the write again. The signature with a trailing
-- `at` is the previous release's pods'.

CREATE OR REPLACE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
DECLARE
    state text := pgsched.heartbeat_pinned(run_id, lease, pg_catalog.now());
BEGIN
    IF state = 'lost' AND pgsched.reestablish_claim(run_id, lease) THEN
        state := pgsched.heartbeat_pinned(run_id, lease, pg_catalog.now());
    END IF;
    RETURN state;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid, ignored_at timestamp with time zone) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pgsched.heartbeat(run_id, lease);
$$;

REVOKE ALL ON FUNCTION pgsched.heartbeat(run_id bigint, lease uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.heartbeat(run_id bigint, lease uuid, ignored_at timestamp with time zone) FROM PUBLIC;

-- pgsched_job is missing where the migrating role may not create roles.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.heartbeat(run_id bigint, lease uuid) TO pgsched_job;
        GRANT EXECUTE ON FUNCTION pgsched.heartbeat(run_id bigint, lease uuid, ignored_at timestamp with time zone) TO pgsched_job;
    END IF;
END;
$$;
