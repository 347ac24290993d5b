-- The run API's own statements (pgsched.runapi); the pods' calls are the lease functions.

-- name: run_namespace
-- The namespace a run belongs to, for its per-namespace budget (asked once per run).
SELECT d.namespace
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.id = %(run_id)s;

-- name: lease_key
SELECT key FROM pgsched.lease_key;

-- name: stamp_presence
-- This replica serves the run API now; after a gap longer than `gap`, the API is
-- available again from now (see migration 0039).
INSERT INTO pgsched.run_api_presence AS p (only_row, available_since, seen_at)
VALUES (true, %(now)s, %(now)s)
ON CONFLICT (only_row) DO UPDATE
SET available_since = CASE WHEN p.seen_at < %(now)s - %(gap)s THEN %(now)s ELSE p.available_since END,
    seen_at = greatest(p.seen_at, %(now)s)
RETURNING available_since, seen_at;

-- name: listen_for_stopping_runs
-- The channel the job_runs trigger notifies with the id of a run that must stop
-- (sql/functions/notify_lease_holder.sql).
LISTEN pgsched_run_stopping;
