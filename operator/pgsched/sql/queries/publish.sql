-- name: claim_run_events
-- Up to %(limit)s pending changes in fair turns (k8s/reporting/publisher.py, "Fair turns"). Each
-- ScheduledJob with pending changes waits in the line of the earliest due instant among
-- them, at the place of its oldest change; the lines take turns: every line's first
-- ScheduledJob goes before any line's second. So a run due a second after a stampede is
-- not behind the stampede's thousands of changes, and a ScheduledJob's changes are
-- claimed together (one status patch for all). The ranking reads the whole outbox, not
-- job_runs (14 ms with a stampede's 10,000 changes pending, 3 ms oldest first; usually the
-- outbox holds a handful). Any replica may publish: SKIP LOCKED hands each change to
-- exactly one of them, and a second replica takes the next ScheduledJobs in line.
WITH waiting AS (
    SELECT e.definition_id, min(e.scheduled_for) AS instant, min(e.id) AS first
    FROM pgsched.run_events AS e
    GROUP BY e.definition_id
), turns AS (
    SELECT w.definition_id, w.first,
           row_number() OVER (PARTITION BY w.instant ORDER BY w.first) AS turn
    FROM waiting AS w
), chosen AS (
    SELECT t.definition_id, t.first, t.turn
    FROM turns AS t
    ORDER BY t.turn, t.first
    LIMIT %(limit)s
), claimed AS (
    SELECT e.*, c.turn, c.first
    FROM chosen AS c
    JOIN pgsched.run_events AS e ON e.definition_id = c.definition_id
    ORDER BY c.turn, c.first, e.id
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
)
SELECT e.id, e.run_id, e.definition_id, e.status, e.reason, e.attempt, e.trigger, e.at,
       r.error, r.scheduled_for, r.started_at, r.finished_at, r.k8s_job_name, r.exit_code,
       r.cancelled_by, r.retry_decision, r.status AS run_status,
       r.retry_of, (SELECT f.reason FROM pgsched.job_runs AS f WHERE f.id = r.retry_of) AS retry_of_reason,
       (SELECT f.retry_decision FROM pgsched.job_runs AS f WHERE f.id = r.retry_of) AS retry_of_decision,
       d.namespace, d.name, s.waiting_message
FROM claimed AS e
JOIN pgsched.job_runs AS r ON r.id = e.run_id
JOIN pgsched.job_definitions AS d ON d.id = e.definition_id
LEFT JOIN pgsched.run_starts AS s ON s.run_id = e.run_id
ORDER BY e.turn, e.first, e.id;

-- name: delete_run_events
DELETE FROM pgsched.run_events WHERE id = ANY(%(ids)s::bigint[]);

-- name: queue_depth
SELECT d.namespace, count(*) AS due
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.status = 'QUEUED' AND r.scheduled_for <= coalesce(%(now)s::timestamptz, now())
GROUP BY d.namespace;

-- name: running_runs_with_jobs
-- Runs the outcome watch should have settled by now: running for a while, with a Job.
-- Runs awaiting a verdict are the verdict loop's (pgsched/k8s/jobside/verdicts.py).
SELECT r.id, r.attempt, r.lease_token, r.k8s_job_name, r.started_at, d.namespace, d.name
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.status = 'RUNNING'
  AND r.k8s_job_name IS NOT NULL
  AND r.outcome_pending_at IS NULL
  AND r.started_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(min_age_seconds)s)
ORDER BY r.id
LIMIT %(limit)s;

-- name: try_resync_lock
SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended('pgsched:resync', 0)) AS locked;

-- name: release_resync_lock
SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended('pgsched:resync', 0)) AS released;

-- name: failure_streaks
-- ScheduledJobs whose latest final outcomes are failures (the streak auto-suspension counts).
SELECT namespace, name, consecutive_failures, auto_suspended_at IS NOT NULL AS auto_suspended
FROM pgsched.job_definitions
WHERE deleted_at IS NULL AND consecutive_failures > 0;
