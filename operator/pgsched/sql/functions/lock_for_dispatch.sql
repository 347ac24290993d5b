-- Earlier releases' claim step: the definitions' and pools' claim locks, waited for.

CREATE OR REPLACE FUNCTION pgsched.lock_for_dispatch(definition_ids uuid[], pool_keys text[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    -- Definitions first, then pools: ascending slots, as the claim waits.
    PERFORM pgsched.lock_claim_keys('dispatch', definition_ids::text[], 'wait');
    PERFORM pgsched.lock_claim_keys('pool', pool_keys, 'wait');
END;
$$;

REVOKE ALL ON FUNCTION pgsched.lock_for_dispatch(definition_ids uuid[], pool_keys text[]) FROM PUBLIC;
