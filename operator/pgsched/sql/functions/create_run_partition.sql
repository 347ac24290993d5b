-- A new month of job_runs, taking its rows out of the default partition under job_runs'
-- own ACCESS EXCLUSIVE lock, so no statement can look for a run while it is in flight (I1;
-- docs/architecture.md, "History is partitioned by month").

CREATE OR REPLACE FUNCTION pgsched.create_run_partition(month timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

REVOKE ALL ON FUNCTION pgsched.create_run_partition(month timestamp with time zone) FROM PUBLIC;
