-- Claims and chaining lock rows of pgsched.claim_locks only: the advisory half that 0027
-- kept for the previous release's calls in flight goes, once none can be left.
--
-- A call keeps the body it started with, inside its transaction. So once every
-- transaction that began before this one (which began after 0027 committed) has ended,
-- no call runs a body older than 0027's, and the rows alone exclude every claimer. Only
-- the sessions of roles that may call the claim or the chain lock are waited for (a job
-- login's transaction, however long, cannot hold up the upgrade), and only in this
-- database (a session of another database on the same server cannot call pgsched's
-- functions here), each one at most 60 s: a transaction open that long is not a claim,
-- and the error names it. (Revised after release to add "only in this database": the
-- schema it leaves is the same, and pgsched/db/migrate.py accepts the earlier text.)
DO $$
DECLARE
    began timestamptz := now();
    waited_until timestamptz := clock_timestamp() + interval '60 seconds';
    left_over text;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity afresh on every round
        SELECT string_agg(format('pid %s (%s, in a transaction since %s)',
                                 a.pid, a.usename, a.xact_start), ', ')
        INTO left_over
        FROM pg_stat_activity AS a
        WHERE a.pid <> pg_backend_pid()
          AND a.backend_type = 'client backend'
          AND a.datname = current_database()
          AND a.xact_start < began
          AND (has_function_privilege(a.usesysid,
                   'pgsched.claim_for_dispatch(integer, integer, timestamptz, uuid[], text)',
                   'EXECUTE')
               OR has_function_privilege(a.usesysid, 'pgsched.lock_chains(uuid[])', 'EXECUTE'));
        EXIT WHEN left_over IS NULL;
        IF clock_timestamp() > waited_until THEN
            RAISE EXCEPTION 'waited 60 s for transactions that began before migration 0027'
                ' to end, and these have not: %', left_over
                USING HINT = 'End them (pg_terminate_backend) or wait, then run the migration'
                             ' again; nothing was changed.';
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.lock_claim_keys(kind text, keys text[], lock_mode text)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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
