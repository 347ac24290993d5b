-- Retention as the previous release's history service calls it: the detach and the drop in
-- one transaction. It can go once no supported release calls it.

CREATE OR REPLACE FUNCTION pgsched.drop_run_partition(partition_name text, lock_wait interval) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    outcome text := pgsched.detach_run_partition(partition_name, lock_wait);
BEGIN
    IF outcome <> 'detached' THEN
        RETURN outcome;
    END IF;
    EXECUTE format('DROP TABLE pgsched.%I', 'expired_' || partition_name);
    RETURN 'dropped';
END;
$$;

REVOKE ALL ON FUNCTION pgsched.drop_run_partition(partition_name text, lock_wait interval) FROM PUBLIC;
