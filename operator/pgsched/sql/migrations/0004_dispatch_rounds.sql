-- Dispatch in fewer round trips and with fewer locks (measured in bench/README.md).
--
-- The claim locked and counted every definition among ~4 x batch candidates (~180 for a
-- batch of 50) in separate statements. Now it locks, in key order and blocking, only the
-- definitions of the earliest candidates that can fill the batch, and counts them in the
-- same call; only when caps leave the batch short does it *try* (never wait for) the
-- locks of the further candidates' definitions. A definition another dispatcher holds in
-- that second round is skipped this time, as SKIP LOCKED skips rows; nothing ever waits
-- out of key order, so no deadlock is possible.
--
-- Inside these (VOLATILE, plpgsql) functions every statement takes a fresh snapshot under
-- READ COMMITTED, so the counts are read after the locks were granted: every claim that
-- committed before a lock was granted is counted, which is what keeps caps exact (I2).

CREATE FUNCTION pgsched.dispatch_counts(definition_ids uuid[])
RETURNS TABLE (id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean,
               running bigint, stopping bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id, d.max_concurrent_runs, d.concurrency_policy, d.deleted_at IS NOT NULL,
           r.running, r.stopping
    FROM pgsched.job_definitions AS d
    CROSS JOIN LATERAL (
        SELECT count(*) AS running, count(*) FILTER (WHERE cancel_requested) AS stopping
        FROM pgsched.job_runs
        WHERE definition_id = d.id AND status = 'RUNNING'
    ) AS r
    WHERE d.id = ANY(definition_ids);
$$;

CREATE FUNCTION pgsched.lock_and_count_for_dispatch(definition_ids uuid[])
RETURNS TABLE (id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean,
               running bigint, stopping bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgsched.lock_definitions_for_dispatch(definition_ids);
    RETURN QUERY SELECT * FROM pgsched.dispatch_counts(definition_ids);
END;
$$;

CREATE FUNCTION pgsched.try_lock_and_count_for_dispatch(definition_ids uuid[])
RETURNS TABLE (id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean,
               running bigint, stopping bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    granted uuid[];
BEGIN
    SELECT coalesce(array_agg(d), '{}') INTO granted
    FROM unnest(definition_ids) AS d
    WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0));
    RETURN QUERY SELECT * FROM pgsched.dispatch_counts(granted);
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.dispatch_counts(uuid[]),
    pgsched.lock_and_count_for_dispatch(uuid[]),
    pgsched.try_lock_and_count_for_dispatch(uuid[]) FROM PUBLIC;

-- job_runs keeps every attempt forever (the audit trail), so the default autovacuum
-- threshold (20% of the table) would wait for ~200k dead tuples at 1M rows of history.
-- The rows that churn are the live ones; vacuum after ~10k dead tuples whatever the size.
ALTER TABLE pgsched.job_runs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02
);
