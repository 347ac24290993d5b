-- The channel the end of a run notifies when a run waits for it. Derived from
-- pgsched.lease_key, which no role but the owner can read, so no job login can name it.

CREATE OR REPLACE FUNCTION pgsched.dispatch_channel() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    -- 17 + 40 characters, within the 63 an identifier may have.
    SELECT 'pgsched_dispatch_' || left(encode(sha256(convert_to('dispatch:', 'UTF8') || k.key), 'hex'), 40)
    FROM pgsched.lease_key AS k;
$$;

REVOKE ALL ON FUNCTION pgsched.dispatch_channel() FROM PUBLIC;
