-- Verdicts for silent container runs (pgsched/k8s/jobside/verdicts.py).

-- name: runs_awaiting_verdict
SELECT r.id, r.attempt, r.lease_token, r.k8s_job_name, r.heartbeat_at, r.started_at,
       r.workload_ended_at, r.outcome_pending_at, r.cancel_requested, r.cancel_requested_at,
       d.namespace, d.name
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.status = 'RUNNING' AND r.outcome_pending_at IS NOT NULL
ORDER BY r.id
LIMIT %(limit)s;

-- name: fail_silent_run
-- The API confirmed the silence: the Job is still active and nothing says its workload
-- ended. Fenced on the lease, and on the run still pending (a heartbeat that came back
-- meanwhile clears the mark, and then the run is alive after all).
UPDATE pgsched.job_runs AS r
SET status = 'FAILED',
    reason = CASE WHEN r.heartbeat_at IS NULL THEN 'Orphaned' ELSE 'HeartbeatLost' END,
    error = %(error)s,
    -- clock_timestamp(), as finish_run: a claim that waited for this slot starts later.
    finished_at = coalesce(%(now)s::timestamptz, clock_timestamp())
WHERE r.id = %(run_id)s
  AND r.status = 'RUNNING'
  AND r.lease_token = %(lease_token)s
  AND r.outcome_pending_at IS NOT NULL
  AND (r.heartbeat_at IS NULL OR r.heartbeat_at <= r.outcome_pending_at)
RETURNING r.reason;
