-- A definition's cap and its RUNNING runs, counted in one pass over job_runs (0 without
-- one). No SET clause, so it is inlined into the claim.

CREATE OR REPLACE FUNCTION pgsched.dispatch_limits(definition_ids uuid[]) RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean, running bigint, stopping bigint, pool text, version bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT d.id, d.max_concurrent_runs, d.concurrency_policy, d.deleted_at IS NOT NULL,
           coalesce(r.running, 0), coalesce(r.stopping, 0), d.pool, d.version
    FROM pgsched.job_definitions AS d
    LEFT JOIN (
        SELECT j.definition_id, count(*) AS running,
               count(*) FILTER (WHERE j.cancel_requested) AS stopping
        FROM pgsched.job_runs AS j
        WHERE j.status = 'RUNNING' AND j.definition_id = ANY(definition_ids)
        GROUP BY j.definition_id
    ) AS r ON r.definition_id = d.id
    WHERE d.id = ANY(definition_ids);
$$;

REVOKE ALL ON FUNCTION pgsched.dispatch_limits(definition_ids uuid[]) FROM PUBLIC;
