-- Retention, first step: under the lock of job_runs and of the month only, check the month
-- holds no QUEUED, RUNNING or unsettled run, detach it, rename it expired_job_runs_yYYYYmMM
-- and drop the detached table's foreign keys: catalog changes only, whatever the month's
-- size. drop_expired_run_month then drops its files without holding up a claim.

CREATE OR REPLACE FUNCTION pgsched.detach_run_partition(partition_name text, lock_wait interval) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    live_check text := format(
        'SELECT EXISTS (SELECT FROM pgsched.%1$I WHERE status = ''QUEUED'')'
        ' OR EXISTS (SELECT FROM pgsched.%1$I WHERE status = ''RUNNING'')'
        ' OR EXISTS (SELECT FROM pgsched.%1$I WHERE settled_at IS NULL'
        '            AND status IN (''COMPLETED'', ''FAILED'', ''CANCELLED''))',
        partition_name);
    live boolean;
    expired text := 'expired_' || partition_name;
    foreign_key name;
BEGIN
    IF to_regclass(format('pgsched.%I', partition_name)) IS NULL THEN
        RETURN 'gone';
    END IF;
    EXECUTE live_check INTO live;
    IF live THEN
        RETURN 'kept';
    END IF;
    -- Arrivals its runs consumed are spent; those waiting stay (they name an upstream
    -- run, not a row). Done before the lock: the join reads the whole partition's ids.
    EXECUTE format(
        'DELETE FROM pgsched.chain_arrivals AS a WHERE a.consumed_by IS NOT NULL'
        ' AND EXISTS (SELECT FROM pgsched.%I AS r WHERE r.id = a.consumed_by)',
        partition_name);
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms', true);
    BEGIN
        -- ONLY: every query on job_runs locks the parent, so that excludes them all; a
        -- LOCK of the whole tree would also wait for autovacuum on any other month,
        -- which it cannot cancel within lock_wait (autovacuum yields after
        -- deadlock_timeout, 1 s) — with a large current month, round after round, each
        -- one queuing the claims behind it for lock_wait.
        LOCK TABLE ONLY pgsched.job_runs IN ACCESS EXCLUSIVE MODE;
        EXECUTE format('LOCK TABLE pgsched.%I IN ACCESS EXCLUSIVE MODE', partition_name);
        EXECUTE live_check INTO live;  -- again, now that nothing can change it
        IF live THEN
            RETURN 'kept';
        END IF;
        -- The detach also locks the default partition (its bounds change): under the
        -- same wait.
        EXECUTE format('ALTER TABLE pgsched.job_runs DETACH PARTITION pgsched.%I', partition_name);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    EXECUTE format('ALTER TABLE pgsched.%I RENAME TO %I', partition_name, expired);
    -- Its own copy of job_runs' foreign keys: dropping it later would lock job_definitions
    -- (its triggers are the referenced side's) until the files were gone.
    FOR foreign_key IN
        SELECT conname FROM pg_constraint
        WHERE conrelid = format('pgsched.%I', expired)::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE pgsched.%I DROP CONSTRAINT %I', expired, foreign_key);
    END LOOP;
    RETURN 'detached';
END;
$_$;

REVOKE ALL ON FUNCTION pgsched.detach_run_partition(partition_name text, lock_wait interval) FROM PUBLIC;
