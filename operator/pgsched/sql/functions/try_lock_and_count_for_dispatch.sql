-- Earlier releases' second claim round: try (never wait for) the further definitions'
-- locks in one statement, then count in the next, so the count sees every claim committed
-- before the locks were granted (I2).

CREATE OR REPLACE FUNCTION pgsched.try_lock_and_count_for_dispatch(definition_ids uuid[]) RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean, running bigint, stopping bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    granted uuid[] := pgsched.lock_claim_keys('dispatch', definition_ids::text[], 'try')::uuid[];
BEGIN
    -- A new statement, so a new snapshot: it sees every claim committed before the locks.
    RETURN QUERY SELECT * FROM pgsched.dispatch_counts(granted);
END;
$$;

REVOKE ALL ON FUNCTION pgsched.try_lock_and_count_for_dispatch(definition_ids uuid[]) FROM PUBLIC;
