-- Seeding for the benchmarks: set-based INSERTs, so 1M rows take seconds, not minutes.
-- Every benchmark row lives in namespace 'bench'.

-- name: seed_definitions
-- Rows computed by bench.seed with the engine's own schedule code, so next_run_at is a
-- real occurrence of each schedule (as the engine would have stored it).
INSERT INTO pgsched.job_definitions
    (id, namespace, name, schedule_kind, schedule, time_zone, anchor, max_concurrent_runs,
     next_run_at)
SELECT gen_random_uuid(), 'bench', d.name, d.kind, d.schedule, d.zone, %(anchor)s, %(cap)s,
       d.next_run_at
FROM unnest(%(names)s::text[], %(kinds)s::text[], %(schedules)s::text[], %(zones)s::text[],
            %(next_run_at)s::timestamptz[]) AS d(name, kind, schedule, zone, next_run_at);

-- name: set_caps
UPDATE pgsched.job_definitions SET max_concurrent_runs = %(cap)s WHERE namespace = 'bench';

-- name: clear_pools
DELETE FROM pgsched.job_pools WHERE namespace = 'bench';

-- name: seed_pools
INSERT INTO pgsched.job_pools (namespace, name, concurrency_limit)
SELECT 'bench', 'pool-' || n, %(limit)s FROM generate_series(0, %(pools)s - 1) AS n;

-- name: set_pools
-- Every bench definition into one of %(pools)s concurrency pools (round robin by name);
-- %(pools)s = 0 takes them all out again.
UPDATE pgsched.job_definitions
SET spec = CASE WHEN %(pools)s = 0 THEN spec - 'pool'
                ELSE spec || jsonb_build_object('pool',
                    'pool-' || (split_part(name, '-', 2)::int %% greatest(%(pools)s, 1))) END
WHERE namespace = 'bench';

-- name: seed_queued
-- Due QUEUED runs, each of a random definition; scheduled_for strictly increasing (one
-- millisecond apart, all in the past) so one batch never collides with itself; a refill
-- colliding with an earlier batch (same definition, same microsecond) is dropped.
WITH d AS (
    SELECT array_agg(id ORDER BY id) AS ids, count(*)::int AS n
    FROM pgsched.job_definitions WHERE namespace = 'bench'
)
INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for)
SELECT d.ids[1 + floor(random() * d.n)::int], 'QUEUED', 'schedule',
       now() - interval '1 minute' - (%(count)s::int - g) * interval '1 millisecond'
FROM d, generate_series(1, %(count)s::int) AS g
ON CONFLICT (definition_id, scheduled_for, trigger)
    WHERE trigger IN ('schedule', 'backfill') AND reason IS DISTINCT FROM 'DuplicateOfRestoredRun'
DO NOTHING;

-- name: seed_history
-- Finished runs, as months of operation leave them: settled, 5%% failed, every definition
-- represented, scheduled long before anything queued.
WITH d AS (
    SELECT array_agg(id ORDER BY id) AS ids, count(*)::int AS n
    FROM pgsched.job_definitions WHERE namespace = 'bench'
)
INSERT INTO pgsched.job_runs
    (definition_id, status, trigger, scheduled_for, lease_token, started_at, heartbeat_at,
     finished_at, settled_at, reason, error, exit_code, k8s_job_name)
SELECT d.ids[1 + g %% d.n],
       CASE WHEN g %% 20 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       'schedule', s.at, gen_random_uuid(), s.at + interval '2 seconds',
       s.at + interval '20 seconds', s.at + interval '31 seconds', s.at + interval '32 seconds',
       CASE WHEN g %% 20 = 0 THEN 'NonZeroExit' END,
       CASE WHEN g %% 20 = 0 THEN 'container "main" exited with code 1' END,
       CASE WHEN g %% 20 = 0 THEN 1 ELSE 0 END,
       'def-' || (1 + g %% d.n) || '-' || g
FROM d, generate_series(%(first)s::int, %(last)s::int) AS g
CROSS JOIN LATERAL (SELECT now() - interval '1 day' - g * interval '10 seconds' AS at) AS s;

-- name: complete_runs
-- The benchmarks' stand-in for jobs finishing: one fenced statement for a whole batch, so
-- a claim loop keeps RUNNING counts small without paying a round trip per run.
UPDATE pgsched.job_runs
SET status = 'COMPLETED', finished_at = clock_timestamp(), settled_at = clock_timestamp()
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'RUNNING';

-- name: truncate_runs
-- Chain arrivals name runs without a foreign key (job_runs is partitioned): named here.
TRUNCATE pgsched.job_runs, pgsched.chain_arrivals RESTART IDENTITY CASCADE;

-- name: truncate_definitions
TRUNCATE pgsched.job_runs, pgsched.job_definitions RESTART IDENTITY CASCADE;

-- name: materialize_sql_only
-- The materialize benchmark's baseline: the same run rows, with no recurrence arithmetic.
INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for)
SELECT id, 'QUEUED', 'schedule', next_run_at
FROM pgsched.job_definitions
WHERE deleted_at IS NULL AND next_run_at <= %(now)s
ON CONFLICT (definition_id, scheduled_for, trigger)
    WHERE trigger IN ('schedule', 'backfill') AND reason IS DISTINCT FROM 'DuplicateOfRestoredRun'
DO NOTHING;

-- name: advance_sql_only
UPDATE pgsched.job_definitions
SET next_run_at = next_run_at + interval '1 hour', last_scheduled_for = next_run_at
WHERE deleted_at IS NULL AND next_run_at <= %(now)s;

-- name: truncate_procrastinate
-- Only when procrastinate's schema exists (the peer benchmark applies it).
DO $$
BEGIN
    IF to_regclass('public.procrastinate_jobs') IS NOT NULL THEN
        TRUNCATE public.procrastinate_jobs RESTART IDENTITY CASCADE;
    END IF;
END
$$;

-- name: delete_runs
-- The latency benchmark's empty table: finished runs are not retained at all.
DELETE FROM pgsched.job_runs WHERE id = ANY(%(ids)s::bigint[]);

-- name: seed_history_span
-- The history benchmark's finished runs, straight into one month's table {table} (a
-- partition, or a table about to be attached as one: no index, no outbox trigger, so 10M
-- rows take minutes): rows %(first)s..%(last)s of %(total)s, spread evenly over the
-- %(span_days)s days before %(base)s and kept to [%(low)s, %(high)s); settled, 5%% failed;
-- every tenth run is the big job's (%(big)s), the rest spread over the bench definitions.
WITH d AS (
    SELECT array_agg(id ORDER BY id) AS ids, count(*)::int AS n
    FROM pgsched.job_definitions WHERE namespace = 'bench'
)
INSERT INTO {table}
    (id, definition_id, status, trigger, scheduled_for, lease_token, started_at,
     heartbeat_at, finished_at, settled_at, reason, exit_code, k8s_job_name)
SELECT nextval('pgsched.job_runs_id_seq'),
       CASE WHEN g %% 10 = 0 THEN %(big)s::uuid ELSE d.ids[1 + g %% d.n] END,
       CASE WHEN g %% 20 = 1 THEN 'FAILED' ELSE 'COMPLETED' END,
       'schedule', s.at, gen_random_uuid(), s.at + interval '2 seconds',
       s.at + interval '20 seconds', s.at + interval '31 seconds', s.at + interval '32 seconds',
       CASE WHEN g %% 20 = 1 THEN 'NonZeroExit' END,
       CASE WHEN g %% 20 = 1 THEN 1 ELSE 0 END,
       'job-' || g
FROM d, generate_series(%(first)s::bigint, %(last)s::bigint) AS g
CROSS JOIN LATERAL (
    SELECT %(base)s::timestamptz - (g::float8 / %(total)s) * %(span_days)s * interval '1 day' AS at
) AS s
WHERE s.at >= %(low)s AND s.at < %(high)s;
