-- pgsched.claim_for_dispatch with one behaviour: the claim always takes its locks.
--
-- 0005 gave the function a third lock_mode, 'none', the same claim without the
-- per-definition advisory locks, so the chaos self-test could plant the over-cap bug
-- through the product. A production claim must not have a mode that drops its locks: the
-- self-tests and the lock-cost benchmark now create their unlocked copy themselves, in
-- the test database (bench/planted.py). Everything else is 0005's function unchanged;
-- docs/architecture.md explains the steps.
--
-- The signature stays (CREATE OR REPLACE keeps its grants, and a replica of the previous
-- release mid-roll calls it with 'wait' or 'try', as it always did); 'none' is now
-- rejected like any other unknown mode.

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
    first_defs uuid[];
    rest_defs uuid[];
    locked uuid[];
    granted uuid[];
    -- The locked definitions' limits, counted once, right after their locks were granted.
    lim_ids uuid[] := '{}';
    lim_max integer[] := '{}';
    lim_policy text[] := '{}';
    lim_deleted boolean[] := '{}';
    lim_running bigint[] := '{}';
    lim_stopping bigint[] := '{}';
    claimable bigint;
    chosen_ids bigint[];
    skipped_ids bigint[];
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

    -- Round one: enough definitions to fill the batch when caps allow.
    SELECT array_agg(DISTINCT d) INTO first_defs FROM unnest(cand_defs[1:batch_size]) AS d;
    IF lock_mode = 'wait' THEN
        PERFORM pgsched.lock_definitions_for_dispatch(first_defs);
        locked := first_defs;
    ELSE
        SELECT coalesce(array_agg(d), '{}') INTO locked
        FROM unnest(first_defs) AS d
        WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0));
        IF cardinality(locked) = 0 THEN
            -- Holding no lock yet, waiting (in key order) cannot deadlock, and it
            -- progresses instead of spinning.
            PERFORM pgsched.lock_definitions_for_dispatch(first_defs);
            locked := first_defs;
        END IF;
    END IF;

    -- A new statement, so a new snapshot: it sees every claim committed before our locks.
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.max_concurrent_runs), '{}'),
           coalesce(array_agg(l.concurrency_policy), '{}'), coalesce(array_agg(l.deleted), '{}'),
           coalesce(array_agg(l.running), '{}'), coalesce(array_agg(l.stopping), '{}')
    INTO lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping
    FROM pgsched.dispatch_counts(locked) AS l;

    -- Round two, only if caps leave the batch short: try the further definitions' locks.
    SELECT coalesce(array_agg(DISTINCT counted.d) FILTER (WHERE counted.room IS NULL), '{}'),
           count(*) FILTER (WHERE counted.n <= counted.room)
    INTO rest_defs, claimable
    FROM (
        SELECT c.d, row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n,
               CASE WHEN NOT l.deleted THEN greatest(l.max_runs - l.running, 0)
                    WHEN l.deleted THEN 0 END AS room  -- NULL: not locked
        FROM unnest(cand_defs) WITH ORDINALITY AS c(d, ord)
        LEFT JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running)
            AS l(id, max_runs, deleted, running) ON l.id = c.d
    ) AS counted;
    IF cardinality(rest_defs) > 0 AND claimable < batch_size THEN
        granted := ARRAY(
            SELECT d FROM unnest(rest_defs) AS d
            WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0)));
        SELECT lim_ids || coalesce(array_agg(l.id), '{}'),
               lim_max || coalesce(array_agg(l.max_concurrent_runs), '{}'),
               lim_policy || coalesce(array_agg(l.concurrency_policy), '{}'),
               lim_deleted || coalesce(array_agg(l.deleted), '{}'),
               lim_running || coalesce(array_agg(l.running), '{}'),
               lim_stopping || coalesce(array_agg(l.stopping), '{}')
        INTO lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping
        FROM pgsched.dispatch_counts(granted) AS l;
    END IF;

    -- Choose, walking the candidates in queue order, with the counts read after the locks.
    -- A candidate whose definition is not locked stays QUEUED (another dispatcher is
    -- claiming it); a deleted definition's runs are being cancelled.
    WITH limits AS (
        SELECT * FROM unnest(lim_ids, lim_max, lim_policy, lim_deleted, lim_running, lim_stopping)
            AS l(id, max_runs, policy, deleted, running, stopping)
        WHERE NOT l.deleted
    ), ranked AS (
        SELECT c.run_id, c.d, c.trig, c.ord,
               row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n,
               greatest(l.max_runs - l.running, 0) AS room,
               l.policy, l.running, l.stopping
        FROM unnest(cand_ids, cand_defs, cand_triggers) WITH ORDINALITY AS c(run_id, d, trig, ord)
        JOIN limits AS l ON l.id = c.d
    ), chosen AS (
        SELECT ranked.run_id, ranked.d FROM ranked
        WHERE ranked.n <= ranked.room
        ORDER BY ranked.ord
        LIMIT batch_size
    ), taken AS (
        SELECT chosen.d, count(*) AS k FROM chosen GROUP BY chosen.d
    ), at_cap AS (
        -- Past the room, of a definition whose room this claim used up entirely: at its
        -- cap. (Past the room of a definition with room left, the batch was full first.)
        SELECT ranked.* FROM ranked LEFT JOIN taken ON taken.d = ranked.d
        WHERE ranked.n > ranked.room AND coalesce(taken.k, 0) = ranked.room
    ), replacing AS (
        -- Runs already asked to stop free their slots soon: ask only for the difference,
        -- or a cap of 2 would see its second run cancelled while the first is stopping.
        SELECT at_cap.d, least(count(*), max(at_cap.running)) - max(at_cap.stopping) AS extra
        FROM at_cap
        WHERE at_cap.trig = 'schedule' AND at_cap.policy = 'Replace'
        GROUP BY at_cap.d
    )
    SELECT (SELECT coalesce(array_agg(chosen.run_id), '{}') FROM chosen),
           (SELECT coalesce(array_agg(at_cap.run_id ORDER BY at_cap.ord), '{}') FROM at_cap
            WHERE at_cap.trig = 'schedule' AND at_cap.policy = 'Skip'),
           (SELECT coalesce(array_agg(DISTINCT at_cap.d), '{}') FROM at_cap),
           (SELECT coalesce(array_agg(replacing.d ORDER BY replacing.d), '{}') FROM replacing
            WHERE replacing.extra > 0),
           (SELECT coalesce(array_agg(replacing.extra ORDER BY replacing.d), '{}') FROM replacing
            WHERE replacing.extra > 0)
    INTO chosen_ids, skipped_ids, at_cap_defs, replace_defs, replace_counts;

    -- Each statement below runs only if it has work: even an empty UPDATE fires the
    -- run_events trigger.
    IF cardinality(at_cap_defs) > 0 THEN
        RETURN QUERY
        SELECT 'at_cap'::text, NULL::bigint, d, NULL::pgsched.job_runs FROM unnest(at_cap_defs) AS d;
    END IF;

    IF cardinality(skipped_ids) > 0 THEN
        RETURN QUERY
        UPDATE pgsched.job_runs AS r
        SET status = 'SKIPPED', reason = 'ConcurrencyPolicy',
            error = 'the definition was at maxConcurrentRuns and concurrencyPolicy is Skip',
            finished_at = moment, settled_at = moment
        WHERE r.id = ANY(skipped_ids) AND r.status = 'QUEUED'
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
