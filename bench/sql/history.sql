-- The history benchmark (bench/history.py): partitions, sizes, WAL.

-- name: partition_exists
SELECT to_regclass(%(partition)s) IS NOT NULL AS found;

-- name: create_partition
SELECT pgsched.create_run_partition(%(month)s::timestamptz) AS moved;

-- name: stage_month
-- A month's table, filled before it is attached (bench.history's fast load).
CREATE TABLE {table} (LIKE pgsched.job_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);

-- name: attach_month
-- As pgsched.create_run_partition attaches: the check spares ATTACH its scan.
ALTER TABLE {table} ADD CONSTRAINT bench_range CHECK (scheduled_for >= {low} AND scheduled_for < {high});

-- name: attach_month_partition
ALTER TABLE pgsched.job_runs ATTACH PARTITION {table} FOR VALUES FROM ({low}) TO ({high});

-- name: attached_month
ALTER TABLE {table} DROP CONSTRAINT bench_range;

-- name: analyze_runs
ANALYZE pgsched.job_runs;

-- name: big_job
-- The job that gets every tenth history run.
SELECT id FROM pgsched.job_definitions WHERE namespace = 'bench' ORDER BY id LIMIT 1;

-- name: database_bytes
SELECT pg_database_size(current_database()) AS bytes;

-- name: oldest_month
-- The oldest monthly partition and its rows (counted: the drop's size, exactly).
SELECT p.name, (xpath('/row/n/text()',
       query_to_xml(format('SELECT count(*) AS n FROM pgsched.%%I', p.name), false, true, '')))[1]
       ::text::bigint AS rows
FROM (
    SELECT c.relname AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'pgsched.job_runs'::regclass AND c.relname ~ '^job_runs_y'
    ORDER BY c.relname LIMIT 1
) AS p;

-- name: wal_lsn
SELECT pg_current_wal_lsn() AS lsn;

-- name: wal_bytes
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(since)s::pg_lsn)::bigint AS bytes;

-- name: partition_count
SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'pgsched.job_runs'::regclass;
