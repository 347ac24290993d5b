-- Earlier releases' claim step, kept for their dispatchers during an upgrade: lock the
-- definitions in key order, then count them.

CREATE OR REPLACE FUNCTION pgsched.lock_and_count_for_dispatch(definition_ids uuid[]) RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean, running bigint, stopping bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pgsched.lock_definitions_for_dispatch(definition_ids);
    RETURN QUERY SELECT * FROM pgsched.dispatch_counts(definition_ids);
END;
$$;

REVOKE ALL ON FUNCTION pgsched.lock_and_count_for_dispatch(definition_ids uuid[]) FROM PUBLIC;
