-- Watching the runs table while benchmarks churn it.

-- name: table_stats
-- Tuple counts from the statistics system (updated within about a second) and sizes,
-- summed over job_runs' partitions (the parent itself holds no rows).
WITH parts AS (
    SELECT relid, isleaf FROM pg_partition_tree('pgsched.job_runs')
)
SELECT sum(s.n_live_tup)::bigint AS live_tuples,
       sum(s.n_dead_tup)::bigint AS dead_tuples,
       sum(s.autovacuum_count)::bigint AS autovacuums,
       sum(s.vacuum_count)::bigint AS vacuums,
       max(s.last_autovacuum) AS last_autovacuum,
       sum(pg_relation_size(p.relid))::bigint AS heap_bytes,
       sum(pg_total_relation_size(p.relid))::bigint AS total_bytes,
       (SELECT sum(pg_relation_size(i.relid))::bigint FROM pg_partition_tree(
            'pgsched.job_runs_queued') AS i WHERE i.isleaf) AS queued_index_bytes,
       (SELECT sum(pg_relation_size(i.relid))::bigint FROM pg_partition_tree(
            'pgsched.job_runs_running') AS i WHERE i.isleaf) AS running_index_bytes,
       count(*) AS partitions
FROM parts AS p
JOIN pg_stat_user_tables AS s ON s.relid = p.relid
WHERE p.isleaf;

-- name: oldest_xmin_age
-- How far the oldest snapshot holds back cleanup (0 when nothing does).
SELECT coalesce(max(age(backend_xmin)), 0) AS xmin_age
FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL;

-- name: count_claims
SELECT count(*) FILTER (WHERE status = 'RUNNING') AS running,
       count(*) FILTER (WHERE status = 'QUEUED') AS queued
FROM pgsched.job_runs;

-- name: count_completed
SELECT count(*) AS done FROM pgsched.job_runs WHERE status = 'COMPLETED';

-- name: count_procrastinate_done
SELECT count(*) AS done FROM public.procrastinate_jobs WHERE status = 'succeeded';

-- name: statement_profile
-- bench.profile: what the server executed since the last reset, heaviest first.
SELECT calls, total_exec_time, left(regexp_replace(query, '\s+', ' ', 'g'), 72) AS query
FROM pg_stat_statements
WHERE query NOT ILIKE '%%pg_stat_statements%%'
ORDER BY total_exec_time DESC;

-- name: vacuum_analyze_runs
VACUUM ANALYZE pgsched.job_runs;

-- name: vacuum_analyze_all
VACUUM ANALYZE pgsched.job_definitions, pgsched.job_runs;

-- name: vacuum_runs
VACUUM pgsched.job_runs;

-- name: vacuum_analyze_procrastinate
VACUUM ANALYZE public.procrastinate_jobs;

-- name: snapshot_read
-- bloat: the read that pins the REPEATABLE READ snapshot for as long as it stays open.
SELECT count(*) AS queued FROM pgsched.job_runs WHERE status = 'QUEUED';

-- name: server_version
SHOW server_version;

-- name: server_settings
SELECT name, setting FROM pg_settings WHERE name = ANY(%(names)s::text[]);

-- name: statements_extension
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: statements_reset
SELECT pg_stat_statements_reset();

-- name: claim_ids_only
-- bench.profile: the engine's claim function alone, returning ids only (no rows to parse).
SELECT c.subject_run FROM pgsched.claim_for_dispatch(%(batch)s, %(overshoot)s, NULL, NULL, 'wait') AS c
WHERE c.outcome = 'claimed';

-- name: claim_locks_held
-- The claim lock rows (pgsched.claim_locks) this transaction holds: a row it locked carries its
-- id (the claim takes them in no subtransaction). A row lock is not in pg_locks.
SELECT count(*) AS n FROM pgsched.claim_locks WHERE xmax = pg_current_xact_id()::xid;
