-- The locks of the claim, of pools and of chains: rows of pgsched.claim_locks, one slot per
-- hashed key, taken in slot order, waited for or only tried (lock_mode).

CREATE OR REPLACE FUNCTION pgsched.lock_claim_keys(kind text, keys text[], lock_mode text) RETURNS text[]
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    block integer := array_position(ARRAY['dispatch', 'pool', 'chain'], kind) - 1;
    slots integer[];
    granted integer[];
BEGIN
    IF block IS NULL OR lock_mode IS NULL OR lock_mode NOT IN ('wait', 'try') THEN
        RAISE EXCEPTION 'kind must be dispatch, pool or chain (not %) and lock_mode wait or try (not %)',
            kind, lock_mode;
    END IF;
    slots := ARRAY(SELECT 4096 * block + (hashtextextended(k, 0) & 4095)::integer
                   FROM unnest(keys) AS k);
    IF lock_mode = 'wait' THEN
        PERFORM FROM pgsched.claim_locks AS l
        WHERE l.slot = ANY(slots)
        ORDER BY l.slot
        FOR UPDATE OF l;
        RETURN keys;
    END IF;
    granted := ARRAY(SELECT l.slot FROM pgsched.claim_locks AS l
                     WHERE l.slot = ANY(slots)
                     FOR UPDATE OF l SKIP LOCKED);
    RETURN ARRAY(SELECT k.key FROM unnest(keys, slots) AS k(key, slot)
                 WHERE k.slot = ANY(granted));
END;
$$;

REVOKE ALL ON FUNCTION pgsched.lock_claim_keys(kind text, keys text[], lock_mode text) FROM PUBLIC;
