-- The SDK runner's checkpoint between heartbeats. Read-only but for the re-establishment:
-- a `lost` here is final for the runner, so it must not answer `lost` where the next
-- heartbeat would re-establish the claim.

CREATE OR REPLACE FUNCTION pgsched.lease_state(run_id bigint, lease uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
DECLARE
    state text;
BEGIN
    FOR attempt IN 1..2 LOOP
        SELECT CASE WHEN r.cancel_requested THEN 'cancel_requested' ELSE 'active' END
        INTO state
        FROM pgsched.job_runs AS r
        WHERE r.id = run_id AND r.status = 'RUNNING' AND r.lease_token = lease;
        EXIT WHEN FOUND OR attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN coalesce(state, 'lost');
END;
$$;

REVOKE ALL ON FUNCTION pgsched.lease_state(run_id bigint, lease uuid) FROM PUBLIC;

-- pgsched_job is missing where the migrating role may not create roles.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.lease_state(run_id bigint, lease uuid) TO pgsched_job;
    END IF;
END;
$$;
