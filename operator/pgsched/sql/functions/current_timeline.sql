-- The timeline of the server this session is on: what run ids are placed by.

CREATE OR REPLACE FUNCTION pgsched.current_timeline() RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    -- The first 8 hex digits of a WAL file name are its timeline (readable without the
    -- privileges pg_control_checkpoint() needs, and current right after a promotion).
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
$$;

REVOKE ALL ON FUNCTION pgsched.current_timeline() FROM PUBLIC;
