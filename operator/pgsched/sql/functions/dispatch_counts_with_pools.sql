-- Earlier releases' counts plus the pool each definition joins, read in the same statement.
-- No SET clause, so it is inlined into its caller; every name is schema-qualified.

CREATE OR REPLACE FUNCTION pgsched.dispatch_counts_with_pools(definition_ids uuid[]) RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean, running bigint, stopping bigint, pool text)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.id, c.max_concurrent_runs, c.concurrency_policy, c.deleted, c.running, c.stopping,
           d.pool
    FROM pgsched.dispatch_counts(definition_ids) AS c
    JOIN pgsched.job_definitions AS d ON d.id = c.id;
$$;

REVOKE ALL ON FUNCTION pgsched.dispatch_counts_with_pools(definition_ids uuid[]) FROM PUBLIC;
