-- Subscribe this session to its run's channel, if the caller holds the run's lease;
-- returns the lease state (so a cancel that came before the subscription is not missed).
-- The LISTEN takes effect when the caller's transaction commits (at once in autocommit).

CREATE OR REPLACE FUNCTION pgsched.listen_for_cancel(run_id bigint, lease uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
DECLARE
    state text := pgsched.lease_state(run_id, lease);
BEGIN
    IF state <> 'lost' THEN
        EXECUTE format('LISTEN %I', pgsched.lease_channel(lease));
    END IF;
    RETURN state;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.listen_for_cancel(run_id bigint, lease uuid) FROM PUBLIC;

-- pgsched_job is missing where the migrating role may not create roles.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.listen_for_cancel(run_id bigint, lease uuid) TO pgsched_job;
    END IF;
END;
$$;
