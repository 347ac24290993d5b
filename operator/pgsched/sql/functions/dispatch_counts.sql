-- Earlier releases' counts per definition, kept for their dispatchers during an upgrade.

CREATE OR REPLACE FUNCTION pgsched.dispatch_counts(definition_ids uuid[]) RETURNS TABLE(id uuid, max_concurrent_runs integer, concurrency_policy text, deleted boolean, running bigint, stopping bigint)
    LANGUAGE sql STABLE
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

REVOKE ALL ON FUNCTION pgsched.dispatch_counts(definition_ids uuid[]) FROM PUBLIC;
