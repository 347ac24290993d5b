-- Concurrency pools: at most N running runs across every job that joins a pool.
--
-- A ConcurrencyPool resource (namespace/name, spec.limit) is upserted into job_pools by
-- the operator; a ScheduledJob joins it with spec.pool, a name in its own namespace (read
-- from the applied spec, so the definition upsert is unchanged). The claim counts a pool's
-- live RUNNING rows under an advisory xact lock on hashtextextended('pool:' || namespace
-- || '/' || name, 0), taken in ONE sorted order together with the definitions' keys
-- (hashtextextended('dispatch:' || id, 0)): every claimer waits for keys in ascending
-- order, whatever kind they are, so definitions and pools locked together cannot deadlock.
-- A replica of the previous release mid-roll waits only for definition keys, in the same
-- order, so it cannot deadlock with this one either (it does not know pools: pool limits
-- hold once every replica runs this release).
--
-- The rules (docs/architecture.md, "Pools"): walking the candidates in queue order (oldest
-- scheduled_for first, across every job of a pool: that is the pool's fairness), a run is
-- claimed while its definition has room under maxConcurrentRuns, its pool has room under
-- its limit, and the batch is not full. A pool that does not exist (yet, or any more)
-- has no room: its jobs' runs wait. A pool at its limit is backpressure; a scheduled run
-- of a concurrencyPolicy Skip job is recorded SKIPPED/ConcurrencyPolicy, the pool named in
-- the error. Replace replaces only the job's own runs, for its own cap; at a pool's limit
-- a Replace job's runs wait like Queue's.

CREATE TABLE pgsched.job_pools (
    namespace         text        NOT NULL,
    name              text        NOT NULL,
    concurrency_limit integer     NOT NULL CHECK (concurrency_limit > 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);

-- The pool a definition joins, as 'namespace/name' (the claim's pool key), from its spec.
ALTER TABLE pgsched.job_definitions
    ADD COLUMN pool text GENERATED ALWAYS AS (namespace || '/' || nullif(spec ->> 'pool', '')) STORED;
CREATE INDEX job_definitions_pool ON pgsched.job_definitions (pool) WHERE pool IS NOT NULL;

-- Every key, definition and pool, waited for in one ascending order.
CREATE FUNCTION pgsched.lock_for_dispatch(definition_ids uuid[], pool_keys text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lock_key bigint;
BEGIN
    FOR lock_key IN
        SELECT DISTINCT k.key FROM (
            SELECT hashtextextended('dispatch:' || d::text, 0) FROM unnest(definition_ids) AS d
            UNION ALL
            SELECT hashtextextended('pool:' || p, 0) FROM unnest(pool_keys) AS p
        ) AS k(key)
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
END;
$$;

-- 0004's counts plus the pool each definition joins, read in the same statement. No SET
-- clause, so it is inlined into the claim (see 0005); every name is schema-qualified.
CREATE FUNCTION pgsched.dispatch_counts_with_pools(definition_ids uuid[])
RETURNS TABLE (id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean,
               running bigint, stopping bigint, pool text)
LANGUAGE sql
STABLE
AS $$
    SELECT c.id, c.max_concurrent_runs, c.concurrency_policy, c.deleted, c.running, c.stopping,
           d.pool
    FROM pgsched.dispatch_counts(definition_ids) AS c
    JOIN pgsched.job_definitions AS d ON d.id = c.id;
$$;

-- A pool's limit (NULL: no such pool) and its live RUNNING runs, over every job that joins
-- it, deleted ones included (their runs still hold slots until they end).
CREATE FUNCTION pgsched.pool_counts(pool_keys text[])
RETURNS TABLE (pool text, concurrency_limit integer, running bigint)
LANGUAGE sql
STABLE
AS $$
    SELECT k.pool, p.concurrency_limit,
           (SELECT count(*)
            FROM pgsched.job_definitions AS d
            JOIN pgsched.job_runs AS r ON r.definition_id = d.id AND r.status = 'RUNNING'
            WHERE d.pool = k.pool)
    FROM unnest(pool_keys) AS k(pool)
    LEFT JOIN pgsched.job_pools AS p
        ON p.namespace = split_part(k.pool, '/', 1) AND p.name = split_part(k.pool, '/', 2);
$$;

REVOKE EXECUTE ON FUNCTION pgsched.lock_for_dispatch(uuid[], text[]),
    pgsched.dispatch_counts_with_pools(uuid[]), pgsched.pool_counts(text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pgsched.claim_for_dispatch(
    batch_size integer,
    overshoot integer,
    at timestamptz,            -- NULL: the database clock
    definition_ids uuid[],     -- NULL: every definition
    lock_mode text             -- 'wait' (sorted, blocking) or 'try' (tried first)
)
RETURNS TABLE (outcome text, subject_run bigint, subject_definition uuid, run pgsched.job_runs)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moment timestamptz := coalesce(at, now());
    cand_ids bigint[];
    cand_defs uuid[];
    cand_triggers text[];
    cand_pools text[];
    first_defs uuid[];
    first_pools text[];
    rest_defs uuid[];
    rest_pools text[];
    locked uuid[];
    locked_pools text[];
    granted uuid[];
    granted_pools text[];
    -- The locked definitions' limits, counted once, right after their locks were granted.
    lim_ids uuid[] := '{}';
    lim_max integer[] := '{}';
    lim_policy text[] := '{}';
    lim_deleted boolean[] := '{}';
    lim_running bigint[] := '{}';
    lim_stopping bigint[] := '{}';
    lim_pool text[] := '{}';
    -- The locked pools' limits and live RUNNING counts, likewise.
    pool_keys text[] := '{}';
    pool_limit integer[] := '{}';
    pool_running bigint[] := '{}';
    claimable bigint;
    chosen_ids bigint[];
    skipped_ids bigint[];
    skipped_errors text[];
    at_cap_defs uuid[];
    replace_defs uuid[];
    replace_counts bigint[];
BEGIN
    IF lock_mode IS NULL OR lock_mode NOT IN ('wait', 'try') THEN
        RAISE EXCEPTION 'lock_mode must be wait or try, not %', lock_mode;
    END IF;

    SELECT coalesce(array_agg(c.id ORDER BY c.scheduled_for, c.id), '{}'),
           coalesce(array_agg(c.definition_id ORDER BY c.scheduled_for, c.id), '{}'),
           coalesce(array_agg(c.trigger ORDER BY c.scheduled_for, c.id), '{}')
    INTO cand_ids, cand_defs, cand_triggers
    FROM (
        SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
        FROM pgsched.job_runs AS r
        WHERE r.status = 'QUEUED'
          AND r.scheduled_for <= moment
          AND (r.deadline_at IS NULL OR r.deadline_at > moment)
          AND (claim_for_dispatch.definition_ids IS NULL
               OR r.definition_id = ANY(claim_for_dispatch.definition_ids))
        ORDER BY r.scheduled_for, r.id
        LIMIT batch_size * overshoot
        FOR UPDATE OF r SKIP LOCKED
    ) AS c;
    IF cardinality(cand_ids) = 0 THEN
        RETURN;
    END IF;

    -- The pool of each candidate's definition, as it is before the locks (which pool keys
    -- to lock); the counts below re-read it after the locks and trust only that reading.
    SELECT array_agg(d.pool ORDER BY c.ord) INTO cand_pools
    FROM unnest(cand_defs) WITH ORDINALITY AS c(d, ord)
    JOIN pgsched.job_definitions AS d ON d.id = c.d;

    -- Round one: enough definitions (and their pools) to fill the batch when limits allow.
    SELECT array_agg(DISTINCT d) INTO first_defs FROM unnest(cand_defs[1:batch_size]) AS d;
    SELECT coalesce(array_agg(DISTINCT p) FILTER (WHERE p IS NOT NULL), '{}') INTO first_pools
    FROM unnest(cand_pools[1:batch_size]) AS p;
    IF lock_mode = 'wait' THEN
        PERFORM pgsched.lock_for_dispatch(first_defs, first_pools);
        locked := first_defs;
        locked_pools := first_pools;
    ELSE
        SELECT coalesce(array_agg(d), '{}') INTO locked
        FROM unnest(first_defs) AS d
        WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0));
        SELECT coalesce(array_agg(p), '{}') INTO locked_pools
        FROM unnest(first_pools) AS p
        WHERE pg_try_advisory_xact_lock(hashtextextended('pool:' || p, 0));
        IF cardinality(locked) = 0 AND cardinality(locked_pools) = 0 THEN
            -- Holding no lock yet, waiting (in key order) cannot deadlock, and it
            -- progresses instead of spinning. Holding some, this claim uses what it holds.
            PERFORM pgsched.lock_for_dispatch(first_defs, first_pools);
            locked := first_defs;
            locked_pools := first_pools;
        END IF;
    END IF;

    -- New statements, so new snapshots: they see every claim committed before our locks.
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.max_concurrent_runs), '{}'),
           coalesce(array_agg(l.concurrency_policy), '{}'), coalesce(array_agg(l.deleted), '{}'),
           coalesce(array_agg(l.running), '{}'), coalesce(array_agg(l.stopping), '{}'),
           coalesce(array_agg(l.pool), '{}')
    INTO lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping, lim_pool
    FROM pgsched.dispatch_counts_with_pools(locked) AS l;
    SELECT coalesce(array_agg(p.pool), '{}'), coalesce(array_agg(p.concurrency_limit), '{}'),
           coalesce(array_agg(p.running), '{}')
    INTO pool_keys, pool_limit, pool_running
    FROM pgsched.pool_counts(locked_pools) AS p;

    -- Round two, only if limits leave the batch short: try the further definitions' locks
    -- and their pools'. What round one can claim: per pool, the candidates within their
    -- definitions' room, up to the pool's room.
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
    SELECT coalesce(array_agg(DISTINCT c.d), '{}'),
           coalesce(array_agg(DISTINCT c.p) FILTER (
               WHERE c.p IS NOT NULL AND NOT c.p = ANY(locked_pools)), '{}')
    INTO rest_defs, rest_pools
    FROM unnest(cand_defs, cand_pools) AS c(d, p)
    WHERE NOT c.d = ANY(lim_ids);
    IF cardinality(rest_defs) > 0 AND claimable < batch_size THEN
        granted := ARRAY(
            SELECT d FROM unnest(rest_defs) AS d
            WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0)));
        granted_pools := ARRAY(
            SELECT p FROM unnest(rest_pools) AS p
            WHERE pg_try_advisory_xact_lock(hashtextextended('pool:' || p, 0)));
        locked_pools := locked_pools || granted_pools;
        SELECT lim_ids || coalesce(array_agg(l.id), '{}'),
               lim_max || coalesce(array_agg(l.max_concurrent_runs), '{}'),
               lim_policy || coalesce(array_agg(l.concurrency_policy), '{}'),
               lim_deleted || coalesce(array_agg(l.deleted), '{}'),
               lim_running || coalesce(array_agg(l.running), '{}'),
               lim_stopping || coalesce(array_agg(l.stopping), '{}'),
               lim_pool || coalesce(array_agg(l.pool), '{}')
        INTO lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping, lim_pool
        FROM pgsched.dispatch_counts_with_pools(granted) AS l;
        SELECT pool_keys || coalesce(array_agg(p.pool), '{}'),
               pool_limit || coalesce(array_agg(p.concurrency_limit), '{}'),
               pool_running || coalesce(array_agg(p.running), '{}')
        INTO pool_keys, pool_limit, pool_running
        FROM pgsched.pool_counts(granted_pools) AS p;
    END IF;

    -- Choose, walking the candidates in queue order, with the counts read after the locks.
    -- A candidate whose definition (or the pool it joins now) is not locked stays QUEUED
    -- (another dispatcher is claiming it); a deleted definition's runs are being cancelled.
    WITH limits AS (
        SELECT * FROM unnest(lim_ids, lim_max, lim_policy, lim_deleted, lim_running,
                             lim_stopping, lim_pool)
            AS l(id, max_runs, policy, deleted, running, stopping, pool)
        WHERE NOT l.deleted AND (l.pool IS NULL OR l.pool = ANY(locked_pools))
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

    -- Each statement below runs only if it has work: even an empty UPDATE fires the
    -- run_events trigger.
    IF cardinality(at_cap_defs) > 0 THEN
        RETURN QUERY
        SELECT 'at_cap'::text, NULL::bigint, d, NULL::pgsched.job_runs FROM unnest(at_cap_defs) AS d;
    END IF;

    IF cardinality(skipped_ids) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET status = 'SKIPPED', reason = 'ConcurrencyPolicy', error = s.error,
            finished_at = moment, settled_at = moment
        FROM unnest(skipped_ids, skipped_errors) AS s(id, error)
        WHERE r.id = s.id AND r.status = 'QUEUED'
        RETURNING 'skipped'::text, r.id, r.definition_id, NULL::pgsched.job_runs;
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
        RETURNING 'replace'::text, r.id, r.definition_id, NULL::pgsched.job_runs;
    END IF;

    -- clock_timestamp(), not now(): the claim happens after the locks were granted, so
    -- started_at is later than the finished_at of any run whose end made room for it.
    IF cardinality(chosen_ids) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET status = 'RUNNING', started_at = coalesce(at, clock_timestamp()),
            lease_token = gen_random_uuid()
        WHERE r.id = ANY(chosen_ids) AND r.status = 'QUEUED'
        RETURNING 'claimed'::text, r.id, r.definition_id, r;
    END IF;
END;
$$;
