-- What runs wait for (pgsched/engine/waits.py): the facts the claim decides on, per run.

-- name: run_waits
-- Each named run that waits — QUEUED, or RUNNING with its Job suspended for admission —
-- with what the claim (pgsched.claim_for_dispatch) would weigh: its definition's cap and the
-- runs holding it, its pool's limit (NULL: no such pool) and the runs holding that, and
-- the Kueue queue its jobTemplate names, and its jittered start (run_delays). Held runs
-- are listed oldest first.
SELECT r.id, r.status, r.scheduled_for, r.deadline_at, r.error,
       (SELECT j.not_before FROM pgsched.run_delays AS j WHERE j.run_id = r.id) AS not_before,
       d.namespace, d.max_concurrent_runs, d.spec ->> 'pool' AS pool,
       d.spec #>> '{jobTemplate,metadata,labels,kueue.x-k8s.io/queue-name}' AS kueue_queue,
       coalesce(s.awaiting_admission, false) AS awaiting_admission,
       p.concurrency_limit AS pool_limit,
       ARRAY(SELECT h.id FROM pgsched.job_runs AS h
             WHERE h.definition_id = d.id AND h.status = 'RUNNING'
             ORDER BY h.id) AS holding,
       ARRAY(SELECT h.id FROM pgsched.job_runs AS h
             WHERE h.definition_id = d.id AND h.status = 'RUNNING' AND h.cancel_requested
             ORDER BY h.id) AS stopping,
       ARRAY(SELECT h.id FROM pgsched.job_runs AS h
             JOIN pgsched.job_definitions AS m ON m.id = h.definition_id
             WHERE d.pool IS NOT NULL AND m.pool = d.pool AND h.status = 'RUNNING'
             ORDER BY h.id) AS pool_holding
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
LEFT JOIN pgsched.run_starts AS s ON s.run_id = r.id
LEFT JOIN pgsched.job_pools AS p ON p.namespace = d.namespace AND p.name = d.spec ->> 'pool'
WHERE r.id = ANY(%(ids)s::bigint[])
  AND (r.status = 'QUEUED' OR (r.status = 'RUNNING' AND s.awaiting_admission));

-- name: first_waiting_run
-- The oldest QUEUED run of a definition (the one its status explains), if any.
SELECT r.id FROM pgsched.job_runs AS r
WHERE r.definition_id = %(definition_id)s AND r.status = 'QUEUED'
ORDER BY r.scheduled_for, r.id
LIMIT 1;
