-- Queries of the pgsched command line. They read; the only write is the backfill insert,
-- which, like every other run row, goes through a unique key. Run-now, cancel and
-- suspend/resume call the engine's own functions.

-- name: run_history
-- Newest first, one definition at a time: with definition_id = one value, each partition's
-- job_runs_history index (definition_id, id DESC) yields its runs in order and a Merge
-- Append stops after the limit, however many runs the job has (= ANY over an array would
-- read them all and sort, or walk every job's runs by id). With --status, one walk per
-- (definition, status) down job_runs_by_status (definition_id, status, id DESC), so a
-- status the job has few or no runs in costs a few index pages, not a read of all its runs
-- (status = ANY(...) on the history index would filter every run of a job that has none).
SELECT r.*
FROM (
    SELECT h.*
    FROM unnest(%(definition_ids)s::uuid[]) AS d(id)
    CROSS JOIN LATERAL (
        SELECT * FROM pgsched.job_runs AS j
        WHERE j.definition_id = d.id
        ORDER BY j.id DESC
        LIMIT %(limit)s
    ) AS h
    WHERE %(statuses)s::text[] IS NULL
    UNION ALL
    SELECT h.*
    FROM unnest(%(definition_ids)s::uuid[]) AS d(id)
    CROSS JOIN (SELECT DISTINCT unnest(%(statuses)s::text[])) AS s(status)
    CROSS JOIN LATERAL (
        -- The range repeats the equality on purpose: the planner, estimating this status's
        -- share of the job's runs from the table's statistics (it cannot know this job
        -- has none, nor, if a month holds a single status, that others exist), would
        -- otherwise walk job_runs_history newest first and filter, reading every run of a
        -- job without one in this status; the range makes that walk look as long as it
        -- can be, so it takes job_runs_by_status (definition_id, status, id DESC).
        SELECT * FROM pgsched.job_runs AS j
        WHERE j.definition_id = d.id AND j.status = s.status
          AND j.status >= s.status AND j.status <= s.status
        ORDER BY j.id DESC
        LIMIT %(limit)s
    ) AS h
) AS r
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: retry_chain
-- Every attempt of the occurrence a run belongs to, first to last: back along retry_of,
-- then forward to the retries of this run.
WITH RECURSIVE earlier AS (
    SELECT r.* FROM pgsched.job_runs AS r WHERE r.id = %(id)s
    UNION ALL
    SELECT r.* FROM pgsched.job_runs AS r JOIN earlier AS e ON r.id = e.retry_of
), later AS (
    SELECT r.* FROM pgsched.job_runs AS r WHERE r.id = %(id)s
    UNION ALL
    SELECT r.* FROM pgsched.job_runs AS r JOIN later AS l ON r.retry_of = l.id
)
SELECT * FROM earlier
UNION
SELECT * FROM later
ORDER BY attempt, id;

-- name: insert_backfill
-- One QUEUED run per occurrence, oldest first. The occurrence key (definition,
-- scheduled_for, trigger) makes a repeated backfill of the same range insert nothing new.
-- No starting deadline: a backfill is late by definition.
-- The requester, when known, is recorded with each run queued (run_requesters).
WITH run AS (
    INSERT INTO pgsched.job_runs (definition_id, status, trigger, scheduled_for)
    SELECT d.id, 'QUEUED', 'backfill', o.at
    FROM pgsched.job_definitions AS d
    CROSS JOIN unnest(%(scheduled_for)s::timestamptz[]) AS o(at)
    WHERE d.id = %(definition_id)s AND d.deleted_at IS NULL
    ORDER BY o.at
    ON CONFLICT (definition_id, scheduled_for, trigger)
        WHERE trigger IN ('schedule', 'backfill') AND reason IS DISTINCT FROM 'DuplicateOfRestoredRun'
    DO NOTHING
    RETURNING id, definition_id, scheduled_for
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
SELECT id, scheduled_for FROM run ORDER BY scheduled_for;

-- name: backfill_progress
-- The latest attempt of each backfill occurrence (retries follow retry_of). A FAILED
-- attempt not settled yet may still be retried, so it does not count as finished.
WITH RECURSIVE chain AS (
    SELECT r.id AS root, r.scheduled_for, r.id, r.attempt, r.status, r.settled_at
    FROM pgsched.job_runs AS r
    WHERE r.definition_id = %(definition_id)s
      AND r.trigger = 'backfill'
      AND r.scheduled_for = ANY(%(scheduled_for)s::timestamptz[])
    UNION ALL
    SELECT c.root, c.scheduled_for, r.id, r.attempt, r.status, r.settled_at
    FROM pgsched.job_runs AS r
    JOIN chain AS c ON r.retry_of = c.id
)
SELECT DISTINCT ON (root) root, scheduled_for, id, attempt, status, settled_at
FROM chain
ORDER BY root, attempt DESC;

-- name: tick_sessions
-- Operator replicas connected for the tick loop. A replica's last statement tells whether
-- it led its latest tick (the explicit release) or found the row taken (the try).
SELECT a.pid, a.application_name, host(a.client_addr) AS client_addr, a.backend_start,
       a.state, a.state_change, a.query,
       a.query LIKE '%%pgsched: stop leading%%' AS led_last_tick,
       coalesce(%(now)s::timestamptz, now()) - a.state_change AS since
FROM pg_stat_activity AS a
WHERE a.datname = current_database() AND a.application_name = 'pgsched-tick'
ORDER BY a.state_change DESC NULLS LAST;

-- name: leader_lock_holders
-- Who holds the tick leader row right now (it is held only while a tick runs).
SELECT a.pid, a.application_name, host(a.client_addr) AS client_addr, a.backend_start
FROM pgsched.leader_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.holder_pid AND a.backend_start = l.holder_started
WHERE l.name = %(lock_name)s AND l.held_until >= coalesce(%(now)s::timestamptz, clock_timestamp());

-- name: stale_running_runs
-- RUNNING runs the reaper should have ended already (past their heartbeat or orphan
-- timeout by more than the slack): while a replica leads ticks, there are none.
SELECT r.id, d.namespace, d.name, r.attempt, r.started_at, r.heartbeat_at,
       count(*) OVER () AS total
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.status = 'RUNNING'
  AND CASE WHEN r.heartbeat_at IS NULL
           THEN r.started_at < coalesce(%(now)s::timestamptz, now())
                - make_interval(secs => d.orphan_timeout_seconds + %(slack_seconds)s)
           ELSE r.heartbeat_at < coalesce(%(now)s::timestamptz, now())
                - make_interval(secs => d.heartbeat_timeout_seconds + %(slack_seconds)s)
      END
ORDER BY r.started_at
LIMIT %(limit)s;

-- name: overdue_queued_runs
-- QUEUED runs waiting for longer than the threshold, and whether their definition is at
-- its cap (waiting for a slot is backpressure; waiting with free slots is not). A run waits
-- from when it could first be claimed: its occurrence, or its queueing if later (a backfill
-- or a run-now for a past instant is not late the moment it is asked for), or its jittered
-- start (run_delays).
SELECT q.* FROM (
    SELECT r.id, d.namespace, d.name, r.attempt, r.trigger, r.scheduled_for,
           greatest(r.scheduled_for, r.created_at,
                    (SELECT j.not_before FROM pgsched.run_delays AS j WHERE j.run_id = r.id))
               AS waiting_since,
           d.max_concurrent_runs,
           (SELECT count(*) FROM pgsched.job_runs AS x
            WHERE x.definition_id = r.definition_id AND x.status = 'RUNNING') AS running
    FROM pgsched.job_runs AS r
    JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
    WHERE r.status = 'QUEUED'
      AND r.scheduled_for < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(threshold_seconds)s)
) AS q
WHERE q.waiting_since < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(threshold_seconds)s)
ORDER BY q.waiting_since, q.id
LIMIT %(limit)s;

-- name: overdue_definitions
-- Definitions whose next occurrence should have been materialized long ago.
SELECT namespace, name, next_run_at, count(*) OVER () AS total
FROM pgsched.job_definitions
WHERE deleted_at IS NULL
  AND next_run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(threshold_seconds)s)
ORDER BY next_run_at
LIMIT %(limit)s;

-- name: not_ready_definitions
-- ScheduledJobs that are not Ready, as their status says it: the latest generation was
-- rejected (an older one may run), or no run of it can start (engine/starts.py, refusal).
SELECT d.namespace, d.name, d.generation, d.rejected_generation, d.rejection,
       cs.refused_run, cs.refused_reason, cs.refused_error
FROM pgsched.job_definitions AS d
LEFT JOIN LATERAL pgsched.cannot_start(d.id, d.updated_at, %(cannot_start)s::text[]) AS cs
    ON true
WHERE d.deleted_at IS NULL AND (d.rejection IS NOT NULL OR cs.refused_run IS NOT NULL)
ORDER BY d.namespace, d.name;

-- name: auto_suspended_definitions
SELECT namespace, name, auto_suspended_at, auto_suspend_reason
FROM pgsched.job_definitions
WHERE deleted_at IS NULL AND auto_suspended_at IS NOT NULL
ORDER BY auto_suspended_at;

-- name: outbox_backlog
-- Run status changes not yet published to Kubernetes (Events, statuses).
SELECT count(*) AS events, coalesce(%(now)s::timestamptz, now()) - min(at) AS oldest_age
FROM pgsched.run_events;
