-- A new month takes its rows out of the default partition under job_runs' own lock, so no
-- statement can look for a run while it is in flight (I1; docs/architecture.md, "History
-- is partitioned by month").
--
-- 0012's create_run_partition locked only the default partition while it moved a month's
-- rows out of it. A statement on job_runs fixes the partitions it reads when it locks
-- job_runs (AccessShare or RowExclusive, which the attach's SHARE UPDATE EXCLUSIVE lets
-- through), then waits for each partition's lock. One that did so during the move had
-- fixed the months without the new one, waited for the default partition, then read with
-- a snapshot taken after the move: the rows were out of the default partition and their
-- new month out of its plan. The NOT EXISTS reads that keep one run per run-now token
-- (runs.sql enqueue_manual), per upstream run (chain.sql insert_chained_runs) and per
-- failed attempt (settle.sql insert_retry) found nothing and inserted a second run (seen:
-- tests/db/test_partition_races.py), and a heartbeat or finish of a moved RUNNING run
-- updated no row: its job lost the lease.
--
-- Now the function takes job_runs' ACCESS EXCLUSIVE lock first, as detaching a month does
-- (migration 0019). Every statement on job_runs takes a lock on it that this one
-- conflicts with, so a statement either locked job_runs before the move (and the move
-- waits for its transaction to end) or after it committed (and its plan has the new
-- month). The lock is held as long as the default partition's was (the move of that
-- month's rows and a catalog change), which every claim already waited for; the history
-- service still waits for it at most its LOCK_WAIT and tries again next round.
CREATE OR REPLACE FUNCTION pgsched.create_run_partition(month timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    low timestamptz := date_trunc('month', month, 'UTC');
    high timestamptz := low + interval '1 month';
    name text := 'job_runs_' || to_char(low AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
    moved bigint := 0;
BEGIN
    -- First, before any partition (the order of every statement on job_runs): see above.
    LOCK TABLE pgsched.job_runs IN ACCESS EXCLUSIVE MODE;
    -- Autovacuum as migration 0004 tuned the whole table: early, for the live queue.
    EXECUTE format(
        'CREATE TABLE pgsched.%I (LIKE pgsched.job_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
        ' WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,'
        ' autovacuum_analyze_scale_factor = 0.02)', name);
    IF to_regclass('pgsched.job_runs_default') IS NOT NULL THEN
        EXECUTE format(
            'WITH gone AS (DELETE FROM pgsched.job_runs_default'
            ' WHERE scheduled_for >= $1 AND scheduled_for < $2 RETURNING *)'
            ' INSERT INTO pgsched.%I SELECT * FROM gone', name) USING low, high;
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    -- The check lets ATTACH skip its scan of the new partition.
    EXECUTE format(
        'ALTER TABLE pgsched.%I ADD CONSTRAINT %I CHECK (scheduled_for >= %L AND scheduled_for < %L)',
        name, name || '_range', low, high);
    EXECUTE format(
        'ALTER TABLE pgsched.job_runs ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
        name, low, high);
    EXECUTE format('ALTER TABLE pgsched.%I DROP CONSTRAINT %I', name, name || '_range');
    RETURN moved;
END;
$$;
