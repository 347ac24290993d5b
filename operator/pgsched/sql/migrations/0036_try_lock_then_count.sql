-- The previous releases' try-lock-and-count (0027) took its locks and counted in one
-- statement, so the count was read from that statement's snapshot, taken before the locks
-- were granted: a claim another dispatcher committed just before releasing them was not
-- counted, and a definition could run over maxConcurrentRuns (I2). Seen as a flaky
-- `tests/db/test_races.py::test_previous_release_and_this_one_claiming_side_by_side_keep_caps`,
-- about one run in ten with both cores busy: 2 runs RUNNING under a cap of 1. The waiting
-- variant and this release's claim already lock in one statement and count in the next;
-- now this one does too.

CREATE OR REPLACE FUNCTION pgsched.try_lock_and_count_for_dispatch(definition_ids uuid[])
RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean,
              running bigint, stopping bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    granted uuid[] := pgsched.lock_claim_keys('dispatch', definition_ids::text[], 'try')::uuid[];
BEGIN
    -- A new statement, so a new snapshot: it sees every claim committed before the locks.
    RETURN QUERY SELECT * FROM pgsched.dispatch_counts(granted);
END;
$$;
