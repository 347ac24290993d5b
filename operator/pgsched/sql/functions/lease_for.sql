-- The lease of a claim of run `run_id` with `nonce` (8 bytes): the nonce, then the first
-- 8 bytes of HMAC-SHA256(lease key, run id || nonce).

CREATE OR REPLACE FUNCTION pgsched.lease_for(run_id bigint, nonce bytea) RETURNS uuid
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    mac bytea;
BEGIN
    IF run_id IS NULL OR nonce IS NULL OR length(nonce) <> 8 THEN
        RAISE EXCEPTION 'lease_for: a run id and a nonce of 8 bytes are needed (run %, nonce %)',
            run_id, nonce;
    END IF;
    SELECT substr(sha256(k.outer_pad || sha256(k.inner_pad || int8send(run_id) || nonce)), 1, 8)
    INTO mac
    FROM pgsched.lease_key AS k;
    IF mac IS NULL THEN
        RAISE EXCEPTION 'lease_for: pgsched.lease_key has no key'
            USING HINT = 'the key is created by migration 0032: run pgsched migrate';
    END IF;
    RETURN encode(nonce || mac, 'hex')::uuid;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.lease_for(run_id bigint, nonce bytea) FROM PUBLIC;
