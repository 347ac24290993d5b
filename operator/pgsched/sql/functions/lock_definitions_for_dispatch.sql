-- The definitions' claim locks (lock_claim_keys), waited for: the claim steps of earlier
-- releases and settle's chain lock use it.

CREATE OR REPLACE FUNCTION pgsched.lock_definitions_for_dispatch(definition_ids uuid[]) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT FROM pgsched.lock_claim_keys('dispatch', definition_ids::text[], 'wait');
$$;

REVOKE ALL ON FUNCTION pgsched.lock_definitions_for_dispatch(definition_ids uuid[]) FROM PUBLIC;
