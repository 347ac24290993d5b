-- The channel of a lease: 14 + 40 characters, within the 63 an identifier may have.

CREATE OR REPLACE FUNCTION pgsched.lease_channel(lease uuid) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT 'pgsched_lease_' || left(encode(sha256(convert_to('channel:' || lease::text, 'UTF8')), 'hex'), 40);
$$;

REVOKE ALL ON FUNCTION pgsched.lease_channel(lease uuid) FROM PUBLIC;
