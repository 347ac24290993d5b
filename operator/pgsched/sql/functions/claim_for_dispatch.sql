-- The claim: QUEUED runs become RUNNING under a verifiable lease, within every definition's
-- maxConcurrentRuns and every pool's limit (docs/architecture.md, "Dispatch").
-- queries/dispatch.sql claim_candidates repeats its first statement, to be EXPLAINed
-- (tests/db/test_schema.py keeps the two equal). The nonce is the last 8 bytes of a
-- gen_random_uuid() (62 random bits: only its variant bits are fixed).

CREATE OR REPLACE FUNCTION pgsched.claim_for_dispatch(batch_size integer, overshoot integer, at timestamp with time zone, definition_ids uuid[], lock_mode text) RETURNS TABLE(outcome text, subject_run bigint, subject_definition uuid, run pgsched.job_runs, definition_version bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    moment timestamptz := coalesce(at, now());
    cand_ids bigint[];
    cand_defs uuid[];
    cand_triggers text[];
    -- The candidates' first and last scheduled_for: the months every run this claim
    -- writes lies in (the rest of the overshoot starts after last_at and moves it on).
    first_at timestamptz;
    last_at timestamptz;
    round_two boolean := false;
    want_defs uuid[];
    want_pools text[];
    granted uuid[];
    granted_pools text[];
    locked_pools text[] := '{}';
    spare boolean := false;
    -- The locked definitions' limits, counted once, right after their locks were granted.
    lim_ids uuid[] := '{}';
    lim_max integer[] := '{}';
    lim_policy text[] := '{}';
    lim_deleted boolean[] := '{}';
    lim_running bigint[] := '{}';
    lim_stopping bigint[] := '{}';
    lim_pool text[] := '{}';
    lim_version bigint[] := '{}';
    -- The locked pools' limits and live RUNNING counts, likewise.
    pool_keys text[] := '{}';
    pool_limit integer[] := '{}';
    pool_running bigint[] := '{}';
    claimable bigint;
    chosen_ids bigint[] := '{}';
    skipped_ids bigint[] := '{}';
    skipped_errors text[] := '{}';
    at_cap_defs uuid[] := '{}';
    replace_defs uuid[] := '{}';
    replace_counts bigint[] := '{}';
BEGIN
    IF lock_mode IS NULL OR lock_mode NOT IN ('wait', 'try') THEN
        RAISE EXCEPTION 'lock_mode must be wait or try, not %', lock_mode;
    END IF;

    -- The first batch of candidates and their definitions; the overshoot's further ones
    -- are selected (and row-locked) below only if the first batch leaves them anything to
    -- decide.
    SELECT coalesce(array_agg(c.id ORDER BY c.scheduled_for, c.id), '{}'),
           coalesce(array_agg(c.definition_id ORDER BY c.scheduled_for, c.id), '{}'),
           coalesce(array_agg(c.trigger ORDER BY c.scheduled_for, c.id), '{}'),
           min(c.scheduled_for), max(c.scheduled_for), array_agg(DISTINCT c.definition_id)
    INTO cand_ids, cand_defs, cand_triggers, first_at, last_at, want_defs
    FROM (
        SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
        FROM pgsched.job_runs AS r
        WHERE r.status = 'QUEUED'
          AND r.scheduled_for <= moment
          AND (r.deadline_at IS NULL OR r.deadline_at > moment)
          AND NOT EXISTS (SELECT FROM pgsched.run_delays AS j
                          WHERE j.run_id = r.id AND j.not_before > moment)
          AND (claim_for_dispatch.definition_ids IS NULL
               OR r.definition_id = ANY(claim_for_dispatch.definition_ids))
        ORDER BY r.scheduled_for, r.id
        LIMIT batch_size
        FOR UPDATE OF r SKIP LOCKED
    ) AS c;
    IF cardinality(cand_ids) = 0 THEN
        RETURN;
    END IF;

    -- Lock and count, in up to two rounds. Round one: the definitions of the first batch
    -- (enough candidates to fill it when limits allow). Round two, only if limits leave the
    -- batch short: the further candidates' definitions, tried only.
    LOOP
        -- Phase one, the definitions. Waiting locks are taken by one statement over their
        -- slots in ascending order (migration 0027).
        granted := '{}';
        IF lock_mode = 'try' OR round_two THEN
            granted := pgsched.lock_claim_keys('dispatch', want_defs::text[], 'try')::uuid[];
        END IF;
        IF NOT round_two AND (lock_mode = 'wait' OR cardinality(granted) = 0) THEN
            -- Holding no lock yet, waiting (in key order) cannot deadlock, and it progresses
            -- instead of spinning. Holding some, a trying claim uses what it holds; round
            -- two holds round one's and never waits.
            PERFORM pgsched.lock_claim_keys('dispatch', want_defs::text[], 'wait');
            granted := want_defs;
        END IF;

        -- New statements, so new snapshots: they see every claim committed before our locks.
        SELECT lim_ids || coalesce(array_agg(l.id), '{}'),
               lim_max || coalesce(array_agg(l.max_concurrent_runs), '{}'),
               lim_policy || coalesce(array_agg(l.concurrency_policy), '{}'),
               lim_deleted || coalesce(array_agg(l.deleted), '{}'),
               lim_running || coalesce(array_agg(l.running), '{}'),
               lim_stopping || coalesce(array_agg(l.stopping), '{}'),
               lim_pool || coalesce(array_agg(l.pool), '{}'),
               lim_version || coalesce(array_agg(l.version), '{}')
        INTO lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping, lim_pool,
             lim_version
        FROM pgsched.dispatch_limits(granted) AS l;

        -- Phase two, the pools (as the definitions join them now, read after their locks)
        -- of the candidates within their definition's room, not locked yet, and no others.
        want_pools := '{}';
        IF cardinality(array_remove(lim_pool, NULL)) > 0 THEN
            want_pools := pgsched.pools_with_room(cand_defs, lim_ids, lim_max, lim_deleted,
                                                  lim_running, lim_pool, locked_pools);
        END IF;
        IF cardinality(want_pools) > 0 THEN
            granted_pools := '{}';
            IF lock_mode = 'try' OR round_two THEN
                granted_pools := pgsched.lock_claim_keys('pool', want_pools, 'try');
            END IF;
            IF NOT round_two AND (lock_mode = 'wait' OR cardinality(granted_pools) = 0) THEN
                -- Holding no pool key, waiting for pools in key order cannot deadlock: no
                -- claimer waits for a definition key while it holds a pool key.
                PERFORM pgsched.lock_claim_keys('pool', want_pools, 'wait');
                granted_pools := want_pools;
            END IF;
            locked_pools := locked_pools || granted_pools;
            SELECT pool_keys || coalesce(array_agg(p.pool), '{}'),
                   pool_limit || coalesce(array_agg(p.concurrency_limit), '{}'),
                   pool_running || coalesce(array_agg(p.running), '{}')
            INTO pool_keys, pool_limit, pool_running
            FROM pgsched.pool_counts(granted_pools) AS p;
        END IF;
        EXIT WHEN round_two;

        -- Whether every candidate is claimable with room to spare in its definition and
        -- its pool: then the choice below would claim every candidate and report nothing
        -- (1. above), and the rest of the overshoot would claim the same runs and give no
        -- verdict on a later candidate, since none of their definitions or pools is used
        -- up. So the candidates are claimed as they are, and nothing more is selected.
        SELECT coalesce(bool_and(coalesce(
                   s.id IS NOT NULL AND NOT s.deleted AND s.k < s.max_runs - s.running
                   AND (s.pool IS NULL OR s.pool_k < s.pool_limit - s.pool_running), false)),
               false)
        INTO spare
        FROM (
            SELECT l.id, l.deleted, l.max_runs, l.running, l.pool, c.k,
                   sum(c.k) OVER (PARTITION BY l.pool) AS pool_k,
                   p.pool_limit, p.running AS pool_running
            FROM (SELECT c.d, count(*) AS k FROM unnest(cand_defs) AS c(d) GROUP BY c.d) AS c
            LEFT JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running, lim_pool)
                AS l(id, max_runs, deleted, running, pool) ON l.id = c.d
            LEFT JOIN unnest(pool_keys, pool_limit, pool_running)
                AS p(pool, pool_limit, running) ON p.pool = l.pool AND l.pool = ANY(locked_pools)
        ) AS s;
        EXIT WHEN spare;

        -- The rest of the overshoot: up to batch x overshoot candidates in all, in queue
        -- order after the first batch (none if the first batch was all there was).
        IF cardinality(cand_ids) = batch_size AND overshoot > 1 THEN
            SELECT cand_ids || coalesce(array_agg(c.id ORDER BY c.scheduled_for, c.id), '{}'),
                   cand_defs || coalesce(array_agg(c.definition_id ORDER BY c.scheduled_for, c.id), '{}'),
                   cand_triggers || coalesce(array_agg(c.trigger ORDER BY c.scheduled_for, c.id), '{}'),
                   coalesce(max(c.scheduled_for), last_at)
            INTO cand_ids, cand_defs, cand_triggers, last_at
            FROM (
                SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
                FROM pgsched.job_runs AS r
                WHERE r.status = 'QUEUED'
                  AND r.scheduled_for <= moment
                  AND (r.deadline_at IS NULL OR r.deadline_at > moment)
                  AND NOT EXISTS (SELECT FROM pgsched.run_delays AS j
                                  WHERE j.run_id = r.id AND j.not_before > moment)
                  AND (claim_for_dispatch.definition_ids IS NULL
                       OR r.definition_id = ANY(claim_for_dispatch.definition_ids))
                  AND (r.scheduled_for, r.id) > (last_at, cand_ids[batch_size])
                ORDER BY r.scheduled_for, r.id
                LIMIT batch_size * (overshoot - 1)
                FOR UPDATE OF r SKIP LOCKED
            ) AS c;
        END IF;

        -- Round two, only if limits leave the batch short. What round one can claim: per
        -- pool, the candidates within their definitions' room, up to the pool's room.
        SELECT coalesce(sum(CASE WHEN g.pool IS NULL THEN g.k ELSE least(g.k, g.room) END), 0)
        INTO claimable
        FROM (
            SELECT counted.pool, count(*) AS k,
                   coalesce(max(greatest(p.pool_limit - p.running, 0)), 0) AS room
            FROM (
                SELECT l.pool, c.n, greatest(l.max_runs - l.running, 0) AS def_room
                FROM (
                    SELECT c.d, row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n
                    FROM unnest(cand_defs) WITH ORDINALITY AS c(d, ord)
                ) AS c
                JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running, lim_pool)
                    AS l(id, max_runs, deleted, running, pool) ON l.id = c.d
                WHERE NOT l.deleted AND (l.pool IS NULL OR l.pool = ANY(locked_pools))
            ) AS counted
            LEFT JOIN unnest(pool_keys, pool_limit, pool_running) AS p(pool, pool_limit, running)
                ON p.pool = counted.pool
            WHERE counted.n <= counted.def_room
            GROUP BY counted.pool
        ) AS g;
        EXIT WHEN claimable >= batch_size;
        SELECT coalesce(array_agg(DISTINCT c.d), '{}') INTO want_defs
        FROM unnest(cand_defs) AS c(d)
        WHERE NOT c.d = ANY(lim_ids);
        EXIT WHEN cardinality(want_defs) = 0;
        round_two := true;
    END LOOP;

    IF spare THEN
        chosen_ids := cand_ids;
    ELSE
        -- Choose, walking the candidates in queue order, with the counts read after the
        -- locks. A candidate whose definition is not locked stays QUEUED (another dispatcher
        -- is claiming it); a deleted definition's runs are being cancelled. A pool that is
        -- not locked is not in `pools`: like a pool that does not exist, it has no room and
        -- gives no verdict, so its candidates with room stay QUEUED; a definition at its own
        -- cap is at its cap whatever its pool (0010 reached the same verdict by locking that
        -- pool).
        WITH limits AS (
            SELECT * FROM unnest(lim_ids, lim_max, lim_policy, lim_deleted, lim_running,
                                 lim_stopping, lim_pool)
                AS l(id, max_runs, policy, deleted, running, stopping, pool)
            WHERE NOT l.deleted
        ), pools AS (
            SELECT p.pool, p.pool_limit, greatest(p.pool_limit - p.running, 0) AS pool_room
            FROM unnest(pool_keys, pool_limit, pool_running) AS p(pool, pool_limit, running)
        ), ranked AS (
            SELECT c.run_id, c.d, c.trig, c.ord, l.pool,
                   row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n,
                   greatest(l.max_runs - l.running, 0) AS room,
                   l.policy, l.running, l.stopping
            FROM unnest(cand_ids, cand_defs, cand_triggers) WITH ORDINALITY AS c(run_id, d, trig, ord)
            JOIN limits AS l ON l.id = c.d
        ), within_room AS (
            -- Within its definition's room: ranked again among its pool's such candidates.
            SELECT ranked.run_id,
                   row_number() OVER (PARTITION BY ranked.pool ORDER BY ranked.ord) AS pool_n
            FROM ranked WHERE ranked.n <= ranked.room AND ranked.pool IS NOT NULL
        ), eligible AS (
            SELECT ranked.*, within_room.pool_n, pools.pool_room, pools.pool_limit
            FROM ranked
            LEFT JOIN within_room ON within_room.run_id = ranked.run_id
            LEFT JOIN pools ON pools.pool = ranked.pool
        ), chosen AS (
            -- A pool that does not exist has no room (pool_room NULL): its jobs' runs wait.
            SELECT eligible.run_id, eligible.d, eligible.pool, eligible.ord FROM eligible
            WHERE eligible.n <= eligible.room
              AND (eligible.pool IS NULL OR eligible.pool_n <= eligible.pool_room)
            ORDER BY eligible.ord
            LIMIT batch_size
        ), taken AS (
            SELECT chosen.d, count(*) AS k FROM chosen GROUP BY chosen.d
        ), pool_taken AS (
            SELECT chosen.pool, count(*) AS k, max(chosen.ord) AS last FROM chosen
            WHERE chosen.pool IS NOT NULL GROUP BY chosen.pool
        ), at_cap AS (
            -- Past the room, of a definition whose room this claim used up entirely: at its
            -- cap. (Past the room of a definition with room left, the batch was full first.)
            SELECT eligible.* FROM eligible LEFT JOIN taken ON taken.d = eligible.d
            WHERE eligible.n > eligible.room AND coalesce(taken.k, 0) = eligible.room
        ), at_pool_limit AS (
            -- Not at its own cap, after its pool's room was used up entirely by this claim.
            SELECT eligible.* FROM eligible LEFT JOIN pool_taken ON pool_taken.pool = eligible.pool
            WHERE eligible.pool_limit IS NOT NULL
              AND coalesce(pool_taken.k, 0) = eligible.pool_room
              AND eligible.ord > coalesce(pool_taken.last, 0)
              AND eligible.run_id NOT IN (SELECT at_cap.run_id FROM at_cap)
        ), skipping AS (
            SELECT at_cap.run_id, at_cap.ord,
                   'the definition was at maxConcurrentRuns and concurrencyPolicy is Skip' AS error
            FROM at_cap WHERE at_cap.trig = 'schedule' AND at_cap.policy = 'Skip'
            UNION ALL
            SELECT a.run_id, a.ord,
                   format('the pool %s was at its limit of %s and concurrencyPolicy is Skip',
                          split_part(a.pool, '/', 2), a.pool_limit)
            FROM at_pool_limit AS a WHERE a.trig = 'schedule' AND a.policy = 'Skip'
        ), replacing AS (
            -- Runs already asked to stop free their slots soon: ask only for the difference,
            -- or a cap of 2 would see its second run cancelled while the first is stopping.
            SELECT at_cap.d, least(count(*), max(at_cap.running)) - max(at_cap.stopping) AS extra
            FROM at_cap
            WHERE at_cap.trig = 'schedule' AND at_cap.policy = 'Replace'
            GROUP BY at_cap.d
        )
        SELECT (SELECT coalesce(array_agg(chosen.run_id), '{}') FROM chosen),
               (SELECT coalesce(array_agg(skipping.run_id ORDER BY skipping.ord), '{}') FROM skipping),
               (SELECT coalesce(array_agg(skipping.error ORDER BY skipping.ord), '{}') FROM skipping),
               (SELECT coalesce(array_agg(DISTINCT held.d), '{}') FROM (
                    SELECT at_cap.d FROM at_cap UNION SELECT at_pool_limit.d FROM at_pool_limit
                ) AS held),
               (SELECT coalesce(array_agg(replacing.d ORDER BY replacing.d), '{}') FROM replacing
                WHERE replacing.extra > 0),
               (SELECT coalesce(array_agg(replacing.extra ORDER BY replacing.d), '{}') FROM replacing
                WHERE replacing.extra > 0)
        INTO chosen_ids, skipped_ids, skipped_errors, at_cap_defs, replace_defs, replace_counts;
    END IF;

    -- Each statement below runs only if it has work: even an empty UPDATE fires the
    -- run_events trigger.
    IF cardinality(at_cap_defs) > 0 THEN
        RETURN QUERY
        SELECT 'at_cap'::text, NULL::bigint, d, NULL::pgsched.job_runs, NULL::bigint
        FROM unnest(at_cap_defs) AS d;
    END IF;

    IF cardinality(skipped_ids) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET status = 'SKIPPED', reason = 'ConcurrencyPolicy', error = s.error,
            finished_at = moment, settled_at = moment
        FROM unnest(skipped_ids, skipped_errors) AS s(id, error)
        WHERE r.id = s.id AND r.status = 'QUEUED'
          AND r.scheduled_for >= first_at AND r.scheduled_for <= last_at
        RETURNING 'skipped'::text, r.id, r.definition_id, NULL::pgsched.job_runs, NULL::bigint;
    END IF;

    IF cardinality(replace_defs) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET cancel_requested = true, cancel_requested_at = moment
        WHERE r.id IN (
            SELECT oldest.id
            FROM unnest(replace_defs, replace_counts) AS w(d, extra)
            CROSS JOIN LATERAL (
                SELECT running.id FROM pgsched.job_runs AS running
                WHERE running.definition_id = w.d AND running.status = 'RUNNING'
                  AND NOT running.cancel_requested
                ORDER BY running.started_at, running.id
                LIMIT w.extra
            ) AS oldest
        )
        RETURNING 'replace'::text, r.id, r.definition_id, NULL::pgsched.job_runs, NULL::bigint;
    END IF;

    -- clock_timestamp(), not now(): the claim happens after the locks were granted, so
    -- started_at is later than the finished_at of any run whose end made room for it.
    -- definition_version: the owner's version as read after its lock (see Owners); every
    -- claimed run's definition is among the locked ones.
    IF cardinality(chosen_ids) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET status = 'RUNNING', started_at = coalesce(at, clock_timestamp()),
            lease_token = pgsched.lease_for(r.id, substr(uuid_send(gen_random_uuid()), 9, 8))
        WHERE r.id = ANY(chosen_ids) AND r.status = 'QUEUED'
          AND r.scheduled_for >= first_at AND r.scheduled_for <= last_at
        RETURNING 'claimed'::text, r.id, r.definition_id, r,
                  lim_version[array_position(lim_ids, r.definition_id)];
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.claim_for_dispatch(batch_size integer, overshoot integer, at timestamp with time zone, definition_ids uuid[], lock_mode text) FROM PUBLIC;
