-- The pass over the runs a failover's lost WAL could have touched (pgsched/k8s/failover/revalidation.py,
-- pgsched.timeline_revalidations).

-- name: claim_revalidation
-- The current timeline's pass, for one batch, if it is owed and no other replica holds it:
-- its cursor. A timeline without a row is owed one (the row is written here); a finished
-- pass, or one held by another replica, returns nothing. In the steady state this is one
-- conflicting insert that changes nothing.
INSERT INTO pgsched.timeline_revalidations AS t (timeline, claimed_until)
VALUES (pgsched.current_timeline(),
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(hold_seconds)s))
ON CONFLICT (timeline) DO UPDATE SET claimed_until = excluded.claimed_until
WHERE t.finished_at IS NULL
  AND (t.claimed_until IS NULL OR t.claimed_until <= coalesce(%(now)s::timestamptz, now()))
RETURNING t.timeline, t.after_id, t.claimed_until,
          -- The last id of the timelines before (pgsched.place_run_id): the pass's end.
          (t.timeline - (SELECT b.timeline_id FROM pgsched.run_id_base AS b)) << 40 AS last_id;

-- name: release_revalidation
-- A hold this replica took and could not release (its round lost its database session
-- mid-batch): released, if it is still that hold (claimed_until is the claim's own mark).
UPDATE pgsched.timeline_revalidations AS t
SET claimed_until = NULL
WHERE t.timeline = %(timeline)s AND t.claimed_until = %(claimed_until)s
  AND t.finished_at IS NULL;

-- name: runs_to_revalidate
-- The next batch after the cursor: RUNNING runs, and due QUEUED runs (a claim could have
-- been lost), with ids of the timelines before this one (ids of this one start at
-- (timeline - base) << 40 + 1, pgsched.place_run_id: those runs were created after the loss).
-- ids: only these (the runs the pass restored), or NULL.
SELECT r.id, r.status, r.attempt, r.lease_token, r.k8s_job_name, r.cancel_requested,
       r.cancel_requested_at, r.workload_ended_at, d.namespace, d.name
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.id > %(after_id)s
  AND (%(ids)s::bigint[] IS NULL OR r.id = ANY(%(ids)s::bigint[]))
  AND r.id <= (pgsched.current_timeline() - (SELECT b.timeline_id FROM pgsched.run_id_base AS b)) << 40
  AND (r.status = 'RUNNING'
       OR (r.status = 'QUEUED' AND r.scheduled_for <= coalesce(%(now)s::timestamptz, now())))
ORDER BY r.id
LIMIT %(limit)s;

-- name: advance_revalidation
-- The batch is done: the cursor moves on and the pass is released (finished when the batch
-- was the last); or the batch failed (the API server away): released, the cursor kept. Fenced on the cursor it started from, so a replica whose hold expired
-- mid-batch (and whose batch another replica redid) changes nothing.
UPDATE pgsched.timeline_revalidations AS t
SET after_id = %(after_id)s,
    compared = t.compared + %(compared)s,
    claimed_until = NULL,
    finished_at = CASE WHEN %(finished)s THEN coalesce(%(now)s::timestamptz, now()) END
WHERE t.timeline = %(timeline)s AND t.after_id = %(from_id)s AND t.finished_at IS NULL
RETURNING t.timeline;

-- name: namespaces_of_definitions
-- Where the operator's Jobs can be: the namespaces of live ScheduledJobs.
SELECT DISTINCT d.namespace FROM pgsched.job_definitions AS d WHERE d.deleted_at IS NULL
ORDER BY d.namespace;

-- name: runs_present
-- Which of these run ids the database has.
SELECT r.id FROM pgsched.job_runs AS r WHERE r.id = ANY(%(ids)s::bigint[]);

-- name: restore_lost_run
-- A run whose row the failover lost, restored from its Job (pgsched.restore_lost_run), with the
-- parameters it was given (NULL: none) in the same statement, so a restored run never
-- lacks them: its retries copy them (settle.sql).
WITH l AS (
    SELECT * FROM pgsched.restore_lost_run(
        %(run_id)s::bigint, %(lease)s::uuid, %(namespace)s::text, %(job_name)s::text,
        %(definition_id)s::uuid, %(trigger)s::text, %(scheduled_for)s::timestamptz,
        %(attempt)s::integer, %(retry_of)s::bigint, %(upstream_run_id)s::bigint,
        %(request_token)s::text
    )
), given AS (
    INSERT INTO pgsched.run_parameters (run_id, definition_id, parameters)
    SELECT %(run_id)s::bigint, %(definition_id)s::uuid, %(parameters)s::jsonb
    FROM l
    WHERE l.outcome = 'restored' AND %(parameters)s::jsonb IS NOT NULL
)
SELECT l.outcome, l.duplicate_id, l.duplicate_status FROM l;

-- name: failover_pass_finished
-- Whether the current timeline's pass has finished (no row: it is owed, not finished).
SELECT pgsched.current_timeline() AS timeline,
       coalesce((SELECT t.finished_at IS NOT NULL FROM pgsched.timeline_revalidations AS t
                 WHERE t.timeline = pgsched.current_timeline()), false) AS finished;
