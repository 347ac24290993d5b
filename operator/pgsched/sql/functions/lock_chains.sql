-- Settle's chain lock: the chained definitions' slots of pgsched.claim_locks, waited for.

CREATE OR REPLACE FUNCTION pgsched.lock_chains(definition_ids uuid[]) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT FROM pgsched.lock_claim_keys('chain', definition_ids::text[], 'wait');
$$;

REVOKE ALL ON FUNCTION pgsched.lock_chains(definition_ids uuid[]) FROM PUBLIC;
