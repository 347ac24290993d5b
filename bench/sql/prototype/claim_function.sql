-- The one-call prototype of bench/proposal.py (an experiment, not the engine): the whole
-- claim transaction as one server-side function, so a claim is one round trip and the
-- client parses only the claimed rows. Installed by the benchmarks into their own database
-- (schema "bench"); handles concurrencyPolicy Queue only.
--
-- Same guarantees as the engine's claim: candidates FOR UPDATE SKIP LOCKED (no run claimed
-- twice); a run is claimed only while its definition's advisory lock is held, and its
-- definition's RUNNING count is read by a statement that started after that lock was
-- granted (PL/pgSQL takes a fresh snapshot per statement in READ COMMITTED), so caps hold.
-- The locks are tried, never waited for: a definition another dispatcher is claiming is
-- skipped this time, like SKIP LOCKED skips rows.
CREATE SCHEMA IF NOT EXISTS bench;
CREATE OR REPLACE FUNCTION bench.claim(batch integer, overshoot integer DEFAULT 4)
RETURNS SETOF pgsched.job_runs
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cand_ids bigint[];
    cand_defs uuid[];
    tried uuid[] := '{}';
    wanted uuid[];
    locked uuid[];
    claimed integer := 0;
    got integer;
BEGIN
    SELECT coalesce(array_agg(c.id ORDER BY c.scheduled_for, c.id), '{}'),
           coalesce(array_agg(c.definition_id ORDER BY c.scheduled_for, c.id), '{}')
    INTO cand_ids, cand_defs
    FROM (
        SELECT r.id, r.definition_id, r.scheduled_for
        FROM pgsched.job_runs AS r
        WHERE r.status = 'QUEUED' AND r.scheduled_for <= now()
          AND (r.deadline_at IS NULL OR r.deadline_at > now())
        ORDER BY r.scheduled_for, r.id
        LIMIT batch * overshoot
        FOR UPDATE OF r SKIP LOCKED
    ) AS c;
    LOOP
        -- distinct untried definitions of the earliest untried candidates that could fill the rest
        SELECT array_agg(DISTINCT d) INTO wanted
        FROM (
            SELECT c.d FROM unnest(cand_defs) WITH ORDINALITY AS c(d, ord)
            WHERE NOT c.d = ANY(tried)
            ORDER BY c.ord
            LIMIT batch - claimed
        ) AS w;
        EXIT WHEN wanted IS NULL;
        tried := tried || wanted;
        SELECT coalesce(array_agg(d), '{}') INTO locked
        FROM unnest(wanted) AS d
        WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0));
        -- a new statement, so a new snapshot: it sees every claim committed before our locks
        RETURN QUERY
        WITH room AS (
            SELECT d.id, d.max_concurrent_runs - (
                SELECT count(*) FROM pgsched.job_runs AS r
                WHERE r.definition_id = d.id AND r.status = 'RUNNING') AS room
            FROM pgsched.job_definitions AS d
            WHERE d.id = ANY(locked) AND d.deleted_at IS NULL
        ), ranked AS (
            SELECT c.id, c.ord,
                   row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n, room.room
            FROM unnest(cand_ids, cand_defs) WITH ORDINALITY AS c(id, d, ord)
            JOIN room ON room.id = c.d
        ), chosen AS (
            SELECT id FROM ranked WHERE n <= room ORDER BY ord LIMIT batch - claimed
        )
        UPDATE pgsched.job_runs AS r
        SET status = 'RUNNING', started_at = clock_timestamp(), lease_token = gen_random_uuid()
        WHERE r.id IN (SELECT id FROM chosen) AND r.status = 'QUEUED'
        RETURNING r.*;
        GET DIAGNOSTICS got = ROW_COUNT;
        claimed := claimed + got;
        EXIT WHEN claimed >= batch;
    END LOOP;
END;
$$;
