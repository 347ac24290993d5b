-- Retention removes an expired month's files after job_runs' lock is released (issue 17 #1,
-- measured in bench/README.md, "history").
--
-- 0012's drop_run_partition dropped the month inside the transaction that holds job_runs'
-- ACCESS EXCLUSIVE lock. PostgreSQL removes a dropped table's files at commit, before the
-- transaction's locks are released, and removing them takes time in proportion to their
-- size: on this machine about 1 s for a 3.4 GB table (0.97 s and 1.15 s at COMMIT, the
-- DROP itself 1-2 ms), so a 25M-run month (8.5 GB with its indexes) would hold every claim,
-- heartbeat and finish for seconds. 0012 said "a few milliseconds": true of the months the
-- tests and the 10M benchmark dropped, not of a large one.
--
-- Now it takes two transactions:
--
-- 1. detach_run_partition checks the month as 0012 did (no QUEUED, RUNNING or unsettled
--    run, before and again under the lock; consumed chain arrivals deleted before the
--    lock), then, under the lock of job_runs itself and of the month (not of the other
--    months, which autovacuum may be working on: 0012 locked them all), detaches the
--    month, renames it expired_job_runs_yYYYYmMM and drops the detached table's foreign
--    keys (the copies of job_runs' that a detach leaves it). These change the catalog
--    only, so the lock is held for the checks and a few catalog rows, whatever the
--    month's size.
-- 2. drop_expired_run_month drops that table. Its transaction locks only the detached
--    table, which no query on job_runs reads any more, so its files go without holding up
--    a claim. (With its foreign keys still on it, the DROP would also take job_definitions'
--    ACCESS EXCLUSIVE lock to remove their triggers, and hold it until the files were
--    gone: 0012's drop did that too.)
--
-- A crash between the two leaves an expired_ table: the history service's next round
-- drops every one it finds (the name says what it is; no other table is named so).
--
-- drop_run_partition stays for the previous release's operator during a rolling upgrade
-- (its history service still calls it), now as the detach followed by the DROP in the same
-- transaction: one copy of the checks, and the same outcomes as 0012's ('dropped', 'kept',
-- 'busy', 'gone'); its files still go under job_runs' lock, as they always did for that
-- release, but autovacuum on other months no longer holds it off. It can go once no
-- release that calls it is supported.

CREATE FUNCTION pgsched.detach_run_partition(partition_name text, lock_wait interval)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

REVOKE EXECUTE ON FUNCTION pgsched.detach_run_partition(text, interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pgsched.drop_run_partition(partition_name text, lock_wait interval)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    outcome text := pgsched.detach_run_partition(partition_name, lock_wait);
BEGIN
    IF outcome <> 'detached' THEN
        RETURN outcome;
    END IF;
    EXECUTE format('DROP TABLE pgsched.%I', 'expired_' || partition_name);
    RETURN 'dropped';
END;
$$;

CREATE FUNCTION pgsched.drop_expired_run_month(table_name text, lock_wait interval)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF table_name NOT LIKE 'expired\_job\_runs\_y%' THEN
        RAISE EXCEPTION 'drop_expired_run_month: % is not a detached month (expected a name like expired_job_runs_y2026m08)',
            table_name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_regclass(format('pgsched.%I', table_name)) IS NULL THEN
        RETURN 'gone';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms', true);
    BEGIN
        EXECUTE format('DROP TABLE pgsched.%I', table_name);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    RETURN 'dropped';
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.drop_expired_run_month(text, interval) FROM PUBLIC;
