-- name: unsettled_runs
-- Terminal runs whose consequences (retry, failure streak) are not applied yet.
SELECT r.*
FROM pgsched.job_runs AS r
WHERE r.settled_at IS NULL
  AND r.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
ORDER BY r.id
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED;

-- name: definitions_by_ids
-- NO KEY UPDATE, not UPDATE: settle changes no key, and a plain FOR UPDATE would block the
-- foreign-key check of a chained run inserted into one of these definitions by another
-- settler (which may hold a chain lock this one waits for: a deadlock).
SELECT * FROM pgsched.job_definitions WHERE id = ANY(%(ids)s::uuid[]) FOR NO KEY UPDATE;

-- name: insert_retry
-- One retry per failed attempt, even if two leaders settle concurrently: this transaction
-- holds the failed run's row lock (unsettled_runs), so a retry another settler inserted
-- committed before it, and this statement's snapshot sees it (a unique key on retry_of
-- alone is not possible on the partitioned table).
-- A chained run's retry keeps its upstream run, so the chain shows through retries; every
-- retry keeps the parameters its first attempt was given (run_parameters).
WITH run AS (
    INSERT INTO pgsched.job_runs
        (definition_id, status, trigger, scheduled_for, deadline_at, attempt, retry_of,
         request_token, upstream_run_id)
    SELECT %(definition_id)s, 'QUEUED', 'retry', %(scheduled_for)s, %(deadline_at)s,
           %(attempt)s, %(retry_of)s, NULL, %(upstream_run_id)s
    WHERE NOT EXISTS (SELECT FROM pgsched.job_runs WHERE retry_of = %(retry_of)s)
    RETURNING id, definition_id
), kept AS (
    INSERT INTO pgsched.run_parameters (run_id, definition_id, parameters)
    SELECT run.id, run.definition_id, p.parameters
    FROM run JOIN pgsched.run_parameters AS p ON p.run_id = %(retry_of)s
)
SELECT id FROM run;

-- name: mark_settled
UPDATE pgsched.job_runs AS r
SET settled_at = %(now)s, retry_decision = s.decision
FROM unnest(%(ids)s::bigint[], %(decisions)s::text[]) AS s(id, decision)
WHERE r.id = s.id;

-- name: announce_final_failures
-- A failure that is not retried gets an Event saying why (RunNotRetried): a note on the
-- outbox, like announce_suspensions; 'NOT_RETRIED' is not a run status either.
INSERT INTO pgsched.run_events
    (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
SELECT id, definition_id, 'NOT_RETRIED', reason, attempt, trigger, scheduled_for
FROM pgsched.job_runs
WHERE id = ANY(%(ids)s::bigint[]);

-- name: update_failure_streaks
-- A final failure extends the streak, a success resets it; reaching the threshold suspends.
UPDATE pgsched.job_definitions AS d
SET consecutive_failures = s.streak,
    auto_suspended_at = CASE
        WHEN d.auto_suspended_at IS NULL AND d.failure_suspend_threshold IS NOT NULL
             AND s.streak >= d.failure_suspend_threshold THEN %(now)s
        ELSE d.auto_suspended_at END,
    auto_suspend_reason = CASE
        WHEN d.auto_suspended_at IS NULL AND d.failure_suspend_threshold IS NOT NULL
             AND s.streak >= d.failure_suspend_threshold
        THEN format('%%s failed (failureSuspendThreshold is %%s)',
                    pgsched.plural(s.streak, 'consecutive run', 'consecutive runs'),
                    d.failure_suspend_threshold)
        ELSE d.auto_suspend_reason END
FROM unnest(%(ids)s::uuid[], %(streaks)s::integer[]) AS s(id, streak)
WHERE d.id = s.id
RETURNING d.id, d.auto_suspended_at = %(now)s AS suspended_now, d.auto_suspend_reason;

-- name: announce_suspensions
-- Put automatic suspensions on the run-events outbox: no run changed status, yet the
-- ScheduledJob's status (its Suspended condition) is stale, and the publisher refreshes
-- statuses from the outbox. Status 'AUTO_SUSPENDED' is not a run status: the publisher
-- neither counts it as a run nor posts a run Event for it (the condition's transition
-- posts AutoSuspended). The run is the failure that tipped the streak.
INSERT INTO pgsched.run_events
    (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
SELECT id, definition_id, 'AUTO_SUSPENDED', 'TooManyFailures', attempt, trigger, scheduled_for
FROM pgsched.job_runs
WHERE id = ANY(%(ids)s::bigint[]);
