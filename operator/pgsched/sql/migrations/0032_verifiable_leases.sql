-- Claims that survive their own loss (issue 30): a lease the database can recognise as
-- genuine without the row that stored it.
--
-- With asynchronous replication a failover can lose a claim's commit: the new primary has
-- the run QUEUED again while its Job (in the API server) and its pod (heartbeating with
-- the claim's lease) go on. Its heartbeats were answered `lost`, which stops cooperative
-- workloads and not the others; the run was claimed again and its Job deleted and created
-- anew: a second execution (docs/operations.md, "What a failover can lose").
--
-- Now a lease is verifiable. Its 16 bytes (still a uuid: every signature the job pods and
-- the previous release use stays) are 8 bytes of claim nonce, then the first 8 bytes of
-- HMAC-SHA256(key, run id as 8 big-endian bytes || nonce) (RFC 2104, written here with
-- sha256(), built in since PostgreSQL 11: no extension). The key is 32 random bytes in
-- pgsched.lease_key, which no role but the owner may read; it is created by this
-- migration, so every standby has it long before a failover. So:
--
--   * the claim issues such leases (the only function that sets lease_token);
--   * a heartbeat, finish, workload end or lease check with a genuine lease for a run the
--     database has QUEUED re-establishes the claim (pgsched.reestablish_claim): RUNNING
--     with that lease, fenced on QUEUED, after the claim's own locks and counts, so it
--     keeps maxConcurrentRuns and pool limits like any claim (I2, I9). A run RUNNING under
--     another lease, or terminal, is not touched: still `lost`, so no run is claimed twice;
--   * the launcher that finds the run's Job carrying a genuine older lease adopts it
--     (pgsched.adopt_lease, the owner's alone), fenced on the current lease, instead of
--     deleting the Job and creating it anew.
--
-- A forged lease — a wrong MAC, another run's lease, a lease for a run id the database
-- never had — is refused as before. 64 bits of MAC: a job login can only guess online,
-- one function call per guess (docs/security-database.md, "The lease MAC").

CREATE FUNCTION pgsched.hmac_pad(key bytea, pad integer)
RETURNS bytea
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The key, zero-padded to SHA-256's 64-byte block, each byte XOR pad (0x36 inner,
    -- 0x5c outer). Keys longer than a block would be hashed first; lease_key's are 32 bytes.
    SELECT string_agg(set_byte('\x00'::bytea, 0,
                               CASE WHEN i < length(key) THEN get_byte(key, i) ELSE 0 END # pad),
                      ''::bytea ORDER BY i)
    FROM generate_series(0, 63) AS i;
$$;

CREATE TABLE pgsched.lease_key (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    key bytea NOT NULL CHECK (length(key) = 32),
    -- Computed once: a MAC then costs two sha256() calls.
    inner_pad bytea NOT NULL GENERATED ALWAYS AS (pgsched.hmac_pad(key, 54)) STORED,
    outer_pad bytea NOT NULL GENERATED ALWAYS AS (pgsched.hmac_pad(key, 92)) STORED
);
REVOKE ALL ON TABLE pgsched.lease_key FROM PUBLIC;

-- 32 bytes from three gen_random_uuid() (pg_strong_random; 366 random bits).
INSERT INTO pgsched.lease_key (key)
SELECT sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
              || uuid_send(gen_random_uuid()));

-- The lease of a claim of run `run_id` with `nonce` (8 bytes).
CREATE FUNCTION pgsched.lease_for(run_id bigint, nonce bytea)
RETURNS uuid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
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

-- Whether `lease` is one the claim could have issued for `run_id` (false for NULL).
CREATE FUNCTION pgsched.lease_is_genuine(run_id bigint, lease uuid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN run_id IS NULL OR lease IS NULL THEN false
                ELSE lease = pgsched.lease_for(run_id, substr(uuid_send(lease), 1, 8)) END;
$$;

-- The claim: 0027's whole, with one change, the lease it issues (see above). The nonce is
-- the last 8 bytes of a gen_random_uuid() (62 random bits: only its variant bits are fixed).
CREATE OR REPLACE FUNCTION pgsched.claim_for_dispatch(
    batch_size integer,
    overshoot integer,
    at timestamptz,            -- NULL: the database clock
    definition_ids uuid[],     -- NULL: every definition
    lock_mode text             -- 'wait' (sorted, blocking) or 'try' (tried first)
)
RETURNS TABLE (outcome text, subject_run bigint, subject_definition uuid, run pgsched.job_runs,
               definition_version bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- 0015, 3.
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

-- -- Re-establishing a lost claim ---------------------------------------------------------
--
-- A genuine lease of a run the database has QUEUED: its claim was lost (a failover before
-- the claim's WAL reached the standby, or a deferred launch whose Job the API server did
-- create). Claim it again for that lease, as the claim would have: the run's row first
-- (the claim skips locked candidates, so it never waits for this), then the definition's
-- and the pool's slots in the claim's order, then the live counts. A definition at its cap
-- or a pool at its limit (or a deleted definition) leaves the run QUEUED: the caller
-- answers `lost` as before, and the launcher adopts the Job once the run is claimed.
--
-- started_at is the database clock after the locks, like a claim's (it must be later than
-- the end of any run whose end made room for this one): the database never knew the lost
-- claim's instant. heartbeat_at too: the call is the pod's sign of life, and a run that
-- ever beat has its verdict looked up by its Job's name (reap.sql), which matters here:
-- its launch record (k8s_job_name) was lost with the claim. The run keeps its row, its
-- attempt and its trigger: it is the same attempt, not a retry; its starting deadline is
-- not checked (it did start, on time, on the timeline that was lost).
CREATE FUNCTION pgsched.reestablish_claim(run_id bigint, lease uuid)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    definition uuid;
    pool text;
    room boolean;
BEGIN
    IF NOT pgsched.lease_is_genuine(run_id, lease) THEN
        RETURN false;
    END IF;
    SELECT r.definition_id INTO definition
    FROM pgsched.job_runs AS r
    WHERE r.id = run_id AND r.status = 'QUEUED'
    FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgsched.lock_claim_keys('dispatch', ARRAY[definition::text], 'wait');
    SELECT NOT l.deleted AND l.running < l.max_concurrent_runs, l.pool
    INTO room, pool
    FROM pgsched.dispatch_limits(ARRAY[definition]) AS l;
    IF room AND pool IS NOT NULL THEN
        PERFORM pgsched.lock_claim_keys('pool', ARRAY[pool], 'wait');
        -- A pool that does not exist has no room, as in the claim.
        SELECT coalesce(bool_and(p.running < p.concurrency_limit), false)
        INTO room
        FROM pgsched.pool_counts(ARRAY[pool]) AS p;
    END IF;
    IF NOT coalesce(room, false) THEN
        RETURN false;
    END IF;
    UPDATE pgsched.job_runs AS r
    SET status = 'RUNNING', started_at = clock_timestamp(), heartbeat_at = clock_timestamp(),
        lease_token = lease
    WHERE r.id = run_id AND r.status = 'QUEUED';
    RETURN FOUND;
END;
$$;
REVOKE ALL ON FUNCTION pgsched.reestablish_claim(bigint, uuid) FROM PUBLIC;

-- The job role's functions: the fenced write first (the routine path costs nothing more),
-- and only when it found nothing, the re-establishment and the write again. Same
-- signatures, privileges and settings; the previous release's signatures (with a trailing
-- `at`) call these, so its pods re-establish too. The owner's `*_pinned` variants do not:
-- they are the operator's and the tests' writes, which name the row's own lease.
CREATE OR REPLACE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    state text := pgsched.heartbeat_pinned(run_id, lease, pg_catalog.now());
BEGIN
    IF state = 'lost' AND pgsched.reestablish_claim(run_id, lease) THEN
        state := pgsched.heartbeat_pinned(run_id, lease, pg_catalog.now());
    END IF;
    RETURN state;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    FOR attempt IN 1..2 LOOP
        IF pgsched.workload_ended_pinned(run_id, lease, pg_catalog.now()) THEN
            RETURN true;
        END IF;
        EXIT WHEN attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN false;
END;
$$;

-- Read-only but for the re-establishment: the SDK runner's checkpoint asks this between
-- heartbeats, and a `lost` there is final for the runner, so it must not answer `lost`
-- where the next heartbeat would re-establish the claim (no longer STABLE).
CREATE OR REPLACE FUNCTION pgsched.lease_state(run_id bigint, lease uuid)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    state text;
BEGIN
    FOR attempt IN 1..2 LOOP
        SELECT CASE WHEN r.cancel_requested THEN 'cancel_requested' ELSE 'active' END
        INTO state
        FROM pgsched.job_runs AS r
        WHERE r.id = run_id AND r.status = 'RUNNING' AND r.lease_token = lease;
        EXIT WHEN FOUND OR attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN coalesce(state, 'lost');
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.finish_run(
    run_id bigint,
    lease uuid,
    final_status text,
    final_reason text DEFAULT NULL,
    final_error text DEFAULT NULL,
    final_exit_code integer DEFAULT NULL,
    final_retry_hint text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    IF final_reason IS NOT NULL AND final_reason !~ '^[A-Za-z][A-Za-z0-9_.]{0,63}$' THEN
        RAISE EXCEPTION 'finish_run: reason % is not a short identifier',
            pg_catalog.quote_literal(pg_catalog.left(final_reason, 80))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a letter, then up to 63 letters, digits, "_" or "."'
                         ' (example: NonZeroExit)';
    END IF;
    IF final_exit_code IS NOT NULL AND final_exit_code NOT BETWEEN 0 AND 255 THEN
        RAISE EXCEPTION 'finish_run: exit code % is out of range 0..255', final_exit_code
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: 1';
    END IF;
    IF final_retry_hint IS NOT NULL AND final_retry_hint NOT IN ('retry', 'never') THEN
        RAISE EXCEPTION 'finish_run: retry hint % is not retry or never',
            pg_catalog.quote_literal(pg_catalog.left(final_retry_hint, 80))
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: never';
    END IF;
    -- clock_timestamp(), not now(): a claim that waited for this commit must see a
    -- finished_at earlier than its own started_at, or run intervals would seem to overlap.
    FOR attempt IN 1..2 LOOP
        IF pgsched.finish_run_pinned(run_id, lease, final_status, final_reason, final_error,
                                     final_exit_code, final_retry_hint,
                                     pg_catalog.clock_timestamp()) THEN
            RETURN true;
        END IF;
        EXIT WHEN attempt = 2 OR NOT pgsched.reestablish_claim(run_id, lease);
    END LOOP;
    RETURN false;
END;
$$;

-- -- Adopting the Job of a lost claim -----------------------------------------------------
--
-- The launcher of a claim found the run's Job already there, carrying `adopted`, a genuine
-- earlier lease of this run (its pod holds it): the run takes that lease instead of the
-- one it was `claimed` with, fenced on that one, so the Job is kept and its pod's heartbeats
-- count. The owner's alone.
CREATE FUNCTION pgsched.adopt_lease(run_id bigint, claimed uuid, adopted uuid)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH moved AS (
        UPDATE pgsched.job_runs AS r
        SET lease_token = adopted
        WHERE r.id = run_id AND r.status = 'RUNNING' AND r.lease_token = claimed
          AND adopted <> claimed AND pgsched.lease_is_genuine(run_id, adopted)
        RETURNING r.id
    )
    SELECT EXISTS (SELECT FROM moved);
$$;

REVOKE ALL ON FUNCTION pgsched.hmac_pad(bytea, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.lease_for(bigint, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.lease_is_genuine(bigint, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgsched.adopt_lease(bigint, uuid, uuid) FROM PUBLIC;
