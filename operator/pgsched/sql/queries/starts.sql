-- Starts of runs' workloads (pgsched/engine/starts.py, pgsched/k8s/jobside/starts.py).

-- name: launching_runs
-- Running runs without a recorded workload start, the least recently observed first.
SELECT r.id, r.attempt, r.lease_token, r.k8s_job_name, r.started_at, r.workload_ended_at,
       d.namespace, d.name, d.spec,
       s.waiting_reason, s.awaiting_admission, s.admitted_at, s.bound_at, s.observed_at
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
LEFT JOIN pgsched.run_starts AS s ON s.run_id = r.id
WHERE r.status = 'RUNNING'
  AND s.workload_started_at IS NULL
ORDER BY s.observed_at NULLS FIRST, r.id
LIMIT %(limit)s;

-- name: defer_start_bounds
-- The API server could not be reached: these launching runs' bounds move to no earlier
-- than %(until)s (their next observation keeps the later of this and its own bound). A run
-- never observed yet (claimed just before the absence) gets its row here, observed at its
-- claim: as unobserved as before, with the moved bound.
INSERT INTO pgsched.run_starts AS s (run_id, bound_at, observed_at)
SELECT r.id, %(until)s, r.started_at
FROM pgsched.job_runs AS r
WHERE r.id = ANY(%(ids)s::bigint[]) AND r.status = 'RUNNING' AND r.started_at IS NOT NULL
ON CONFLICT (run_id) DO UPDATE
SET bound_at = greatest(s.bound_at, EXCLUDED.bound_at)
WHERE s.workload_started_at IS NULL;

-- name: record_start_observation
-- Fenced on the run still RUNNING with this lease. A start, or a change to a wait worth
-- telling (%(announce)s: not the ordinary ContainerCreating of every pod), is written to
-- the run-events outbox (status STARTED or LAUNCHING, reason: the pod's) so its status is
-- rendered again and an Event says it. The CTEs see the row as it
-- was before this statement (one snapshot), which is what `before` compares with.
WITH run AS (
    SELECT r.id, r.definition_id, r.attempt, r.trigger, r.scheduled_for
    FROM pgsched.job_runs AS r
    WHERE r.id = %(run_id)s AND r.status = 'RUNNING' AND r.lease_token = %(lease_token)s
), before AS (
    SELECT s.waiting_reason, s.workload_started_at
    FROM pgsched.run_starts AS s
    WHERE s.run_id = %(run_id)s
), stored AS (
    INSERT INTO pgsched.run_starts AS s (
        run_id, workload_started_at, waiting_reason, waiting_message, awaiting_admission,
        admitted_at, bound_at, observed_at
    )
    SELECT run.id, %(workload_started_at)s, %(waiting_reason)s, %(waiting_message)s,
           %(awaiting_admission)s, %(admitted_at)s, %(bound_at)s, %(now)s
    FROM run
    ON CONFLICT (run_id) DO UPDATE SET
        workload_started_at = coalesce(s.workload_started_at, EXCLUDED.workload_started_at),
        waiting_reason = EXCLUDED.waiting_reason,
        waiting_message = EXCLUDED.waiting_message,
        awaiting_admission = EXCLUDED.awaiting_admission,
        admitted_at = coalesce(s.admitted_at, EXCLUDED.admitted_at),
        bound_at = EXCLUDED.bound_at,
        observed_at = EXCLUDED.observed_at
    RETURNING s.*
), announced AS (
    INSERT INTO pgsched.run_events
        (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
    SELECT run.id, run.definition_id,
           CASE WHEN stored.workload_started_at IS NULL THEN 'LAUNCHING' ELSE 'STARTED' END,
           stored.waiting_reason, run.attempt, run.trigger, run.scheduled_for
    FROM run
    JOIN stored ON stored.run_id = run.id
    WHERE (stored.workload_started_at IS NOT NULL OR %(announce)s)
      AND NOT EXISTS (
        SELECT FROM before AS b
        WHERE b.waiting_reason IS NOT DISTINCT FROM stored.waiting_reason
          AND (b.workload_started_at IS NULL) = (stored.workload_started_at IS NULL)
    )
)
SELECT * FROM stored;

-- name: run_start
SELECT * FROM pgsched.run_starts WHERE run_id = %(run_id)s;

-- name: forget_starts_of_dropped_runs
-- Rows of runs whose history month was dropped (engine/history.py).
DELETE FROM pgsched.run_starts AS s
WHERE NOT EXISTS (SELECT FROM pgsched.job_runs AS r WHERE r.id = s.run_id);

-- name: cannot_start
SELECT * FROM pgsched.cannot_start(%(definition_id)s, %(since)s, %(reasons)s::text[]);
