-- name: claim_for_dispatch
-- The whole claim transaction (candidates, definition and pool locks, live counts, claim,
-- Skip and Replace) in one call: sql/functions/claim_for_dispatch.sql; docs/architecture.md,
-- "The claim, step by step".
-- definition_version: the claimed run's definition's version, for the dispatcher's Owners.
SELECT c.outcome, c.subject_run, c.subject_definition, c.definition_version, (c.run).*
FROM pgsched.claim_for_dispatch(
    %(batch_size)s, %(overshoot)s, %(now)s::timestamptz, %(definition_ids)s::uuid[],
    CASE WHEN %(try_locks)s THEN 'try' ELSE 'wait' END
) AS c;

-- name: claim_candidates
-- Step 1 of pgsched.claim_for_dispatch, written out so its plan can be EXPLAINed (a
-- function's inner plans are not): the tests check it uses the partial queue index, the
-- benchmarks measure its buffers. tests/db/test_schema.py proves it is the function's
-- first statement, with the parameters spelled as the query spells them.
SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
FROM pgsched.job_runs AS r
WHERE r.status = 'QUEUED'
  AND r.scheduled_for <= coalesce(%(now)s::timestamptz, now())
  AND (r.deadline_at IS NULL OR r.deadline_at > coalesce(%(now)s::timestamptz, now()))
  AND NOT EXISTS (SELECT FROM pgsched.run_delays AS j
                  WHERE j.run_id = r.id
                    AND j.not_before > coalesce(%(now)s::timestamptz, now()))
  AND (%(definition_ids)s::uuid[] IS NULL OR r.definition_id = ANY(%(definition_ids)s::uuid[]))
ORDER BY r.scheduled_for, r.id
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED;

-- name: on_time_definitions
-- Definitions with a queued run that fell due after %(since)s (or, without it, in the last
-- %(window)s seconds), at most %(limit)s, the newest due first: dispatch claims their runs
-- before the backlog (engine/dispatch.py, run_once). A range of the partial queue index.
-- Not jobs in a pool: its order is oldest first across its jobs, whatever is on time.
SELECT DISTINCT due.definition_id
FROM (
    SELECT r.definition_id
    FROM pgsched.job_runs AS r
    JOIN pgsched.job_definitions AS d ON d.id = r.definition_id AND d.pool IS NULL
    WHERE r.status = 'QUEUED'
      AND r.scheduled_for <= coalesce(%(now)s::timestamptz, now())
      AND NOT EXISTS (SELECT FROM pgsched.run_delays AS j
                      WHERE j.run_id = r.id
                        AND j.not_before > coalesce(%(now)s::timestamptz, now()))
      AND r.scheduled_for > coalesce(
          %(since)s::timestamptz,
          coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
      )
    ORDER BY r.scheduled_for DESC, r.id
    LIMIT %(limit)s
) AS due;

-- name: record_launches
UPDATE pgsched.job_runs AS r SET k8s_job_name = l.handle
FROM unnest(%(ids)s::bigint[], %(lease_tokens)s::uuid[], %(handles)s::text[]) AS l(id, lease_token, handle)
WHERE r.id = l.id AND r.status = 'RUNNING' AND r.lease_token = l.lease_token;

-- name: requeue_deferred_launch
-- A launch deferred because the API server was away (engine/launcher.py, LaunchDeferred):
-- the claim is undone — QUEUED again, no start — and the attempt is unspent. The old
-- lease stays on the row but is dead (every job-role function fences on RUNNING, and the
-- lease-holder trigger tells a pod that holds it at once); the next claim replaces it.
-- Fenced on the claim; a run whose cancellation was requested meanwhile is not requeued
-- (the caller ends it CANCELLED). `error` says why it waits, until it is claimed again.
UPDATE pgsched.job_runs AS r
SET status = 'QUEUED',
    started_at = NULL,
    heartbeat_at = NULL,
    outcome_pending_at = NULL,
    workload_ended_at = NULL,
    error = %(error)s
WHERE r.id = %(run_id)s
  AND r.status = 'RUNNING'
  AND r.lease_token = %(lease_token)s
  AND NOT r.cancel_requested
RETURNING r.id;

-- name: run_parameters_of
-- The values claimed runs were given, for their launch (engine/parameters.py, given_to).
SELECT run_id, parameters FROM pgsched.run_parameters WHERE run_id = ANY(%(ids)s::bigint[]);
