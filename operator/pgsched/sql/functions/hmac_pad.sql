-- One HMAC pad (RFC 2104) of the lease key: leases are HMAC-SHA256 written with sha256(),
-- so no extension is needed (docs/security-database.md, "The lease MAC").

CREATE OR REPLACE FUNCTION pgsched.hmac_pad(key bytea, pad integer) RETURNS bytea
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    -- The key, zero-padded to SHA-256's 64-byte block, each byte XOR pad (0x36 inner,
    -- 0x5c outer). Keys longer than a block would be hashed first; lease_key's are 32 bytes.
    SELECT string_agg(set_byte('\x00'::bytea, 0,
                               CASE WHEN i < length(key) THEN get_byte(key, i) ELSE 0 END # pad),
                      ''::bytea ORDER BY i)
    FROM generate_series(0, 63) AS i;
$$;

REVOKE ALL ON FUNCTION pgsched.hmac_pad(key bytea, pad integer) FROM PUBLIC;
