-- The seed article's claim query, verbatim apart from the schema name and the lease token
-- (pgsched's table requires RUNNING rows to carry one). This is the baseline every claim
-- figure is compared with. pgbench runs this file as is (`-D batch=50`); the Python
-- benchmarks load the same file and bind :batch as a query parameter.
UPDATE pgsched.job_runs
SET status = 'RUNNING', started_at = now(), lease_token = gen_random_uuid()
WHERE id IN (
    SELECT id
    FROM pgsched.job_runs
    WHERE status = 'QUEUED' AND scheduled_for <= now()
    ORDER BY scheduled_for
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
RETURNING *;
