-- name: middle_run_id
-- The run in the middle of the history: where a deep page's continue token points.
SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY r.id) AS id FROM pgsched.job_runs AS r;

-- name: history_bounds
-- The history's first and last run ids, its size and its partitions (runs_api_kubectl).
SELECT min(r.id) AS low, max(r.id) AS high, count(*) AS n,
       (SELECT count(*) FROM pg_catalog.pg_inherits AS i
        WHERE i.inhparent = 'pgsched.job_runs'::regclass) AS partitions
FROM pgsched.job_runs AS r;

-- name: run_named
-- A run's Run API name (its ScheduledJob's name and its id) and its id (runs_api_kubectl).
SELECT r.id, d.name AS scheduled_job FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.id >= %(id)s ORDER BY r.id LIMIT 1;
