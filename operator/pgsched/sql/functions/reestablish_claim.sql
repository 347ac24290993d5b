-- A genuine lease of a run the database has QUEUED: its claim was lost (a failover before
-- the claim's WAL reached the standby, or a deferred launch whose Job the API server did
-- create). Claim it again for that lease, as the claim would have: the run's row first,
-- then the definition's and the pool's slots in the claim's order, then the live counts. A
-- definition at its cap, a pool at its limit or a deleted definition leaves the run QUEUED.

CREATE OR REPLACE FUNCTION pgsched.reestablish_claim(run_id bigint, lease uuid) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    definition uuid;
    pool text;
    room boolean;
BEGIN
    IF NOT pgsched.lease_is_genuine(run_id, lease) THEN
        RETURN false;
    END IF;
    SELECT r.definition_id INTO definition
    FROM pgsched.job_runs AS r
    WHERE r.id = run_id AND r.status = 'QUEUED'
    FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgsched.lock_claim_keys('dispatch', ARRAY[definition::text], 'wait');
    SELECT NOT l.deleted AND l.running < l.max_concurrent_runs, l.pool
    INTO room, pool
    FROM pgsched.dispatch_limits(ARRAY[definition]) AS l;
    IF room AND pool IS NOT NULL THEN
        PERFORM pgsched.lock_claim_keys('pool', ARRAY[pool], 'wait');
        -- A pool that does not exist has no room, as in the claim.
        SELECT coalesce(bool_and(p.running < p.concurrency_limit), false)
        INTO room
        FROM pgsched.pool_counts(ARRAY[pool]) AS p;
    END IF;
    IF NOT coalesce(room, false) THEN
        RETURN false;
    END IF;
    UPDATE pgsched.job_runs AS r
    SET status = 'RUNNING', started_at = clock_timestamp(), heartbeat_at = clock_timestamp(),
        lease_token = lease
    WHERE r.id = run_id AND r.status = 'QUEUED';
    RETURN FOUND;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.reestablish_claim(run_id bigint, lease uuid) FROM PUBLIC;
