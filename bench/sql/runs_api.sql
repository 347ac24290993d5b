-- name: middle_run_id
-- The run in the middle of the history: where a deep page's continue token points.
SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY r.id) AS id FROM pgsched.job_runs AS r;
