-- History partitions (engine/history.py): months created ahead, expired
-- months dropped whole, the default partition pruned of what retention lets go.

-- name: lock_history
-- One replica maintains the partitions at a time; the others skip the round.
SELECT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended('pgsched:history', 0)) AS locked;

-- name: limit_lock_wait
-- For the rest of this transaction (pgsched.detach_run_partition does the same).
SELECT set_config('lock_timeout', (extract(epoch FROM %(lock_wait)s::interval) * 1000)::bigint || 'ms', true);

-- name: run_partitions
-- The monthly partitions, oldest first (the default partition is not one of them).
SELECT c.relname AS name
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'pgsched.job_runs'::regclass
  AND c.relname ~ '^job_runs_y[0-9]{4}m[0-9]{2}$'
ORDER BY c.relname;

-- name: create_run_partition
SELECT pgsched.create_run_partition(%(month)s::timestamptz) AS moved;

-- name: detach_run_partition
-- 'detached' (now pgsched.expired_<name>), 'kept', 'busy' or 'gone'
-- (sql/functions/detach_run_partition.sql).
SELECT pgsched.detach_run_partition(%(name)s, %(lock_wait)s::interval) AS outcome;

-- name: expired_run_months
-- Months detached and not dropped yet: this round's, or one a crash left between the two;
-- month is the partition's name (pgsched.detach_run_partition prefixed it with expired_).
SELECT c.relname AS name, substr(c.relname, length('expired_') + 1) AS month
FROM pg_class AS c
WHERE c.relnamespace = 'pgsched'::regnamespace
  AND c.relkind = 'r'
  AND NOT c.relispartition
  AND c.relname ~ '^expired_job_runs_y[0-9]{4}m[0-9]{2}$'
ORDER BY c.relname;

-- name: drop_expired_run_month
-- In a transaction that locks only the detached table: its files go without holding job_runs.
SELECT pgsched.drop_expired_run_month(%(name)s, %(lock_wait)s::interval) AS outcome;

-- name: prune_default_partition
-- Finished, settled runs older than the retention that no month holds (a backfill from
-- before the oldest month), a batch at a time: the default partition stays small.
DELETE FROM pgsched.job_runs_default AS r
USING (
    SELECT id, scheduled_for FROM pgsched.job_runs_default
    WHERE scheduled_for < %(before)s
      AND status NOT IN ('QUEUED', 'RUNNING')
      AND (settled_at IS NOT NULL OR status = 'SKIPPED')
    LIMIT %(limit)s
) AS old
WHERE r.id = old.id AND r.scheduled_for = old.scheduled_for;
