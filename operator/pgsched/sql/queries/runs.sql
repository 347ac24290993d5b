-- name: run_by_id
-- With its jittered start and parameters, if any (run_delays, run_parameters).
SELECT r.*, j.not_before, p.parameters
FROM pgsched.job_runs AS r
LEFT JOIN pgsched.run_delays AS j ON j.run_id = r.id
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id
WHERE r.id = %(id)s;

-- name: lock_request
-- Run-now requests with one token queue one after the other (see enqueue_manual), and
-- after the restore of a lost run of that token (pgsched.restore_lost_run).
SELECT pgsched.lock_request(%(definition_id)s::uuid, %(token)s::text);

-- name: enqueue_manual
-- Idempotent per (definition, request token): the second request returns nothing. Run
-- after lock_request in its transaction, so NOT EXISTS sees the first request's run
-- (the partitioned table cannot hold a unique key on the token alone).
-- The requester, when known, is recorded with the run (run_requesters).
WITH run AS (
    INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for, request_token)
    SELECT d.id, 'QUEUED', %(trigger)s, coalesce(%(scheduled_for)s::timestamptz, now()),
           %(token)s
    FROM pgsched.job_definitions AS d
    WHERE d.id = %(definition_id)s AND d.deleted_at IS NULL
      AND NOT EXISTS (SELECT FROM pgsched.job_runs AS r
                      WHERE r.definition_id = d.id AND r.request_token = %(token)s)
    RETURNING *
), requester AS (
    INSERT INTO pgsched.run_requesters (run_id, definition_id, requested_by)
    SELECT run.id, run.definition_id, %(requested_by)s::text FROM run
    WHERE %(requested_by)s::text IS NOT NULL
), given AS (
    -- Its spec.parameters values, when given (run_parameters).
    INSERT INTO pgsched.run_parameters (run_id, definition_id, parameters)
    SELECT run.id, run.definition_id, %(parameters)s::jsonb FROM run
    WHERE %(parameters)s::jsonb IS NOT NULL
)
SELECT run.*, NULL::timestamptz AS not_before, %(parameters)s::jsonb AS parameters FROM run;

-- name: run_by_request
SELECT * FROM pgsched.job_runs WHERE definition_id = %(definition_id)s AND request_token = %(token)s;

-- name: cancel_queued
-- now(), not clock_timestamp(), for both stamps: they record one event, so they are equal.
-- clock_timestamp() is only for the end of a RUNNING run (finish_run, fail_silent_run),
-- whose finished_at must precede the started_at of a claim that waited for its slot; a
-- QUEUED run holds no slot and never started.
UPDATE pgsched.job_runs
SET status = 'CANCELLED', reason = 'Cancelled', error = %(why)s, cancelled_by = %(by)s,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    cancel_requested = true, cancel_requested_at = coalesce(%(now)s::timestamptz, now())
WHERE status = 'QUEUED'
  AND (id = %(run_id)s OR definition_id = %(definition_id)s)
RETURNING *;

-- name: request_cancel_running
UPDATE pgsched.job_runs
SET cancel_requested = true, cancel_requested_at = coalesce(%(now)s::timestamptz, now()),
    cancelled_by = %(by)s
WHERE status = 'RUNNING' AND NOT cancel_requested
  AND (id = %(run_id)s OR definition_id = %(definition_id)s)
RETURNING *;

-- name: run_requester
-- Who asked for a manual or backfill run (run_requesters); no row: the schedule, a retry,
-- a chain, or a request that named no requester.
SELECT requested_by FROM pgsched.run_requesters WHERE run_id = %(id)s;

-- name: runs_of_definition
SELECT * FROM pgsched.job_runs
WHERE definition_id = %(definition_id)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: runs_for_status
-- The run counts and the newest run that has started (any trigger; RUNNING included:
-- what status.lastRun, LAST STATUS and LAST RUN show; skipped occurrences and runs
-- cancelled before they started never count), newest by id, in one statement, so one
-- snapshot: read one after the other, a claim committed between the two showed its run
-- as both queued and the last run (QUEUED 1, ACTIVE 0, LAST STATUS RUNNING).
SELECT counts.running, counts.queued, last.*
FROM (
    SELECT count(*) FILTER (WHERE status = 'RUNNING') AS running,
           count(*) FILTER (WHERE status = 'QUEUED') AS queued
    FROM pgsched.job_runs
    WHERE definition_id = %(definition_id)s AND status IN ('RUNNING', 'QUEUED')
) AS counts
LEFT JOIN LATERAL (
    SELECT * FROM pgsched.job_runs
    WHERE definition_id = %(definition_id)s AND started_at IS NOT NULL
    ORDER BY id DESC
    LIMIT 1
) AS last ON true;

-- name: run_endings
SELECT id, status, reason, finished_at, cancel_requested_at,
       coalesce(%(now)s::timestamptz, now()) AS checked_at
FROM pgsched.job_runs WHERE id = ANY(%(ids)s::bigint[]);
