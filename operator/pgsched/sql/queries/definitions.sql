-- name: definition_for_update
SELECT * FROM pgsched.job_definitions WHERE id = %(id)s FOR UPDATE;

-- name: definition_by_id
-- With the generation the operator published (published_generations; NULL: none yet).
-- With the reason of its suspension, if one was given (suspend_reasons).
SELECT d.*, p.generation AS published_generation, s.reason AS suspend_reason
FROM pgsched.job_definitions AS d
LEFT JOIN pgsched.published_generations AS p ON p.definition_id = d.id
LEFT JOIN pgsched.suspend_reasons AS s ON s.definition_id = d.id
WHERE d.id = %(id)s;

-- name: definitions_by_ids_unlocked
SELECT * FROM pgsched.job_definitions WHERE id = ANY(%(ids)s::uuid[]);

-- name: definition_by_name
SELECT d.*, s.reason AS suspend_reason
FROM pgsched.job_definitions AS d
LEFT JOIN pgsched.suspend_reasons AS s ON s.definition_id = d.id
WHERE d.namespace = %(namespace)s AND d.name = %(name)s AND d.deleted_at IS NULL;

-- name: definitions_by_name_with_deleted
-- Every ScheduledJob that had this name, the live one (if any) first, then newest first.
SELECT * FROM pgsched.job_definitions
WHERE namespace = %(namespace)s AND name = %(name)s
ORDER BY deleted_at IS NOT NULL, created_at DESC;

-- name: upsert_definition
INSERT INTO pgsched.job_definitions AS d (
    id, namespace, name, generation, schedule_kind, schedule, time_zone, dst_gap, dst_repeat,
    anchor, catch_up, catch_up_limit, starting_deadline_seconds, max_concurrent_runs,
    concurrency_policy, active_deadline_seconds, retry_policy, heartbeat_interval_seconds,
    heartbeat_timeout_seconds, orphan_timeout_seconds, cancel_grace_seconds,
    failure_suspend_threshold, suspended, spec, next_run_at, after_mode, created_at, updated_at,
    max_queued_runs
) VALUES (
    %(id)s, %(namespace)s, %(name)s, %(generation)s, %(schedule_kind)s, %(schedule)s,
    %(time_zone)s, %(dst_gap)s, %(dst_repeat)s, %(anchor)s, %(catch_up)s, %(catch_up_limit)s,
    %(starting_deadline_seconds)s, %(max_concurrent_runs)s, %(concurrency_policy)s,
    %(active_deadline_seconds)s, %(retry_policy)s, %(heartbeat_interval_seconds)s,
    %(heartbeat_timeout_seconds)s, %(orphan_timeout_seconds)s, %(cancel_grace_seconds)s,
    %(failure_suspend_threshold)s, %(suspended)s, %(spec)s, %(next_run_at)s, %(after_mode)s,
    %(now)s, %(now)s, %(max_queued_runs)s
)
ON CONFLICT (id) DO UPDATE SET
    namespace = EXCLUDED.namespace,
    name = EXCLUDED.name,
    generation = EXCLUDED.generation,
    schedule_kind = EXCLUDED.schedule_kind,
    schedule = EXCLUDED.schedule,
    time_zone = EXCLUDED.time_zone,
    dst_gap = EXCLUDED.dst_gap,
    dst_repeat = EXCLUDED.dst_repeat,
    catch_up = EXCLUDED.catch_up,
    catch_up_limit = EXCLUDED.catch_up_limit,
    starting_deadline_seconds = EXCLUDED.starting_deadline_seconds,
    max_concurrent_runs = EXCLUDED.max_concurrent_runs,
    max_queued_runs = EXCLUDED.max_queued_runs,
    concurrency_policy = EXCLUDED.concurrency_policy,
    active_deadline_seconds = EXCLUDED.active_deadline_seconds,
    retry_policy = EXCLUDED.retry_policy,
    heartbeat_interval_seconds = EXCLUDED.heartbeat_interval_seconds,
    heartbeat_timeout_seconds = EXCLUDED.heartbeat_timeout_seconds,
    orphan_timeout_seconds = EXCLUDED.orphan_timeout_seconds,
    cancel_grace_seconds = EXCLUDED.cancel_grace_seconds,
    failure_suspend_threshold = EXCLUDED.failure_suspend_threshold,
    suspended = EXCLUDED.suspended,
    -- Toggling spec.suspend from true to false is a resume: it also clears an automatic
    -- suspension and its failure streak (as `pgsched resume` does).
    auto_suspended_at = CASE WHEN d.suspended AND NOT EXCLUDED.suspended
                             THEN NULL ELSE d.auto_suspended_at END,
    auto_suspend_reason = CASE WHEN d.suspended AND NOT EXCLUDED.suspended
                               THEN NULL ELSE d.auto_suspend_reason END,
    consecutive_failures = CASE WHEN d.suspended AND NOT EXCLUDED.suspended
                                THEN 0 ELSE d.consecutive_failures END,
    spec = EXCLUDED.spec,
    next_run_at = EXCLUDED.next_run_at,
    after_mode = EXCLUDED.after_mode,
    updated_at = EXCLUDED.updated_at,
    rejected_generation = NULL,
    rejection = NULL
RETURNING *;

-- name: reevaluate_queued_deadlines
-- The deadline of a queued run is its time plus startingDeadlineSeconds, as materialize and
-- settle compute it (from the jittered start, if any: run_delays); manual runs and backfills
-- never have one (they are asked for late).
UPDATE pgsched.job_runs AS r
SET deadline_at = coalesce(
        (SELECT j.not_before FROM pgsched.run_delays AS j WHERE j.run_id = r.id),
        r.scheduled_for
    ) + make_interval(secs => d.starting_deadline_seconds)
FROM pgsched.job_definitions AS d
WHERE d.id = %(id)s AND r.definition_id = d.id AND r.status = 'QUEUED'
  AND r.trigger IN ('schedule', 'retry');

-- name: mark_definition_deleted
UPDATE pgsched.job_definitions
SET deleted_at = coalesce(deleted_at, %(now)s), next_run_at = NULL, updated_at = %(now)s
WHERE id = %(id)s
RETURNING *;

-- name: set_definition_suspended
UPDATE pgsched.job_definitions
SET suspended = %(suspended)s, updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *;

-- name: set_suspend_reason
-- The pgsched.dev/suspend-reason annotation (k8s/scheduledjobs/suspension.py); NULL removes it.
-- Not a change of the definition: its version (trigger job_definitions_version) stays.
WITH removed AS (
    DELETE FROM pgsched.suspend_reasons
    WHERE definition_id = %(id)s AND %(reason)s::text IS NULL
)
INSERT INTO pgsched.suspend_reasons (definition_id, reason)
SELECT %(id)s, %(reason)s::text WHERE %(reason)s::text IS NOT NULL
ON CONFLICT (definition_id) DO UPDATE SET reason = EXCLUDED.reason;

-- name: clear_auto_suspend
UPDATE pgsched.job_definitions
SET auto_suspended_at = NULL, auto_suspend_reason = NULL, consecutive_failures = 0,
    updated_at = %(now)s
WHERE id = %(id)s AND deleted_at IS NULL
RETURNING *;

-- name: reject_generation
-- An invalid spec never replaces the stored definition; remember why it was refused.
UPDATE pgsched.job_definitions
SET rejected_generation = %(generation)s, rejection = %(rejection)s, updated_at = %(now)s
WHERE id = %(id)s AND generation < %(generation)s
RETURNING *;

-- name: mark_published
-- The operator wrote this generation's status and Event (k8s/scheduledjobs.py).
INSERT INTO pgsched.published_generations (definition_id, generation)
VALUES (%(id)s, %(generation)s)
ON CONFLICT (definition_id) DO UPDATE SET generation = EXCLUDED.generation
WHERE published_generations.generation IS DISTINCT FROM EXCLUDED.generation;
