-- name: due_definitions
-- The oldest due first; an idle tick reads an empty range of the job_definitions_due index.
-- SKIP LOCKED: a second leader (a paused one that woke up) takes other definitions or none.
SELECT *
FROM pgsched.job_definitions
WHERE deleted_at IS NULL
  AND next_run_at <= %(now)s
  AND schedule_kind = ANY(%(kinds)s)
ORDER BY next_run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: due_definitions_on_time
-- Those due after %(on_time_since)s (the previous round's "now"), the newest due first:
-- asked only when more is due than a batch holds (engine/materialize.py, "A bounded
-- amount per round"). A range of the same index, read backwards.
SELECT *
FROM pgsched.job_definitions
WHERE deleted_at IS NULL
  AND next_run_at <= %(now)s
  AND next_run_at > %(on_time_since)s
  AND schedule_kind = ANY(%(kinds)s)
ORDER BY next_run_at DESC
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: queued_counts
-- For definitions with maxQueuedRuns: how many of their runs are QUEUED now.
SELECT definition_id, count(*) AS queued
FROM pgsched.job_runs
WHERE status = 'QUEUED' AND definition_id = ANY(%(ids)s::uuid[])
GROUP BY definition_id;

-- name: suspend_reasons_of
-- Why these suspended definitions are (suspend_reasons), for their SKIPPED rows' note.
SELECT definition_id, reason FROM pgsched.suspend_reasons
WHERE definition_id = ANY(%(ids)s::uuid[]);

-- name: insert_occurrences
-- The unique occurrence key makes a repeat impossible even if two leaders ever raced here.
INSERT INTO pgsched.job_runs
    (definition_id, status, trigger, scheduled_for, deadline_at, reason, error,
     finished_at, settled_at)
SELECT o.definition_id, o.status, 'schedule', o.scheduled_for, o.deadline_at, o.reason,
       o.error,
       CASE WHEN o.status = 'SKIPPED' THEN %(now)s END,
       CASE WHEN o.status = 'SKIPPED' THEN %(now)s END
FROM unnest(%(definition_ids)s::uuid[], %(statuses)s::text[], %(scheduled_for)s::timestamptz[],
            %(deadlines)s::timestamptz[], %(reasons)s::text[], %(errors)s::text[])
     AS o(definition_id, status, scheduled_for, deadline_at, reason, error)
ON CONFLICT (definition_id, scheduled_for, trigger)
    WHERE trigger IN ('schedule', 'backfill') AND reason IS DISTINCT FROM 'DuplicateOfRestoredRun'
DO NOTHING;

-- name: set_jittered_starts
-- The jittered start of the runs just inserted with spec.jitterSeconds (engine/jitter.py),
-- in the same transaction (run_delays). A repeat (its insert did nothing) finds the
-- row there already.
INSERT INTO pgsched.run_delays (run_id, definition_id, not_before)
SELECT r.id, r.definition_id, j.not_before
FROM unnest(%(definition_ids)s::uuid[], %(scheduled_for)s::timestamptz[],
            %(not_before)s::timestamptz[]) AS j(definition_id, scheduled_for, not_before)
JOIN pgsched.job_runs AS r
  ON r.definition_id = j.definition_id AND r.scheduled_for = j.scheduled_for
 AND r.trigger = 'schedule'
ON CONFLICT (run_id) DO NOTHING;

-- name: advance_definitions
UPDATE pgsched.job_definitions AS d
SET next_run_at = a.next_run_at,
    last_scheduled_for = coalesce(a.last_scheduled_for, d.last_scheduled_for)
FROM unnest(%(ids)s::uuid[], %(next_run_at)s::timestamptz[], %(last_scheduled_for)s::timestamptz[])
     AS a(id, next_run_at, last_scheduled_for)
WHERE d.id = a.id;
