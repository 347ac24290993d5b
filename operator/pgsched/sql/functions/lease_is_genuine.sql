-- Whether `lease` is one the claim could have issued for `run_id` (false for NULL).

CREATE OR REPLACE FUNCTION pgsched.lease_is_genuine(run_id bigint, lease uuid) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN run_id IS NULL OR lease IS NULL THEN false
                ELSE lease = pgsched.lease_for(run_id, substr(uuid_send(lease), 1, 8)) END;
$$;

REVOKE ALL ON FUNCTION pgsched.lease_is_genuine(run_id bigint, lease uuid) FROM PUBLIC;
