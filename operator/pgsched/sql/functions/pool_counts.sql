-- A pool's limit (NULL: no such pool) and its live RUNNING runs, over every job that joins
-- it, deleted ones included (their runs still hold slots until they end).

CREATE OR REPLACE FUNCTION pgsched.pool_counts(pool_keys text[]) RETURNS TABLE(pool text, concurrency_limit integer, running bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT k.pool, p.concurrency_limit,
           (SELECT count(*)
            FROM pgsched.job_definitions AS d
            JOIN pgsched.job_runs AS r ON r.definition_id = d.id AND r.status = 'RUNNING'
            WHERE d.pool = k.pool)
    FROM unnest(pool_keys) AS k(pool)
    LEFT JOIN pgsched.job_pools AS p
        ON p.namespace = split_part(k.pool, '/', 1) AND p.name = split_part(k.pool, '/', 2);
$$;

REVOKE ALL ON FUNCTION pgsched.pool_counts(pool_keys text[]) FROM PUBLIC;
