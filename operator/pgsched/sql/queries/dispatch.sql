-- name: claim_candidates
-- About 4 x batch candidates, so one definition with hundreds of queued runs at the front
-- cannot crowd the whole batch out before per-definition caps are applied.
SELECT r.id, r.definition_id, r.trigger, r.scheduled_for
FROM pgsched.job_runs AS r
WHERE r.status = 'QUEUED'
  AND r.scheduled_for <= coalesce(%(now)s::timestamptz, now())
  AND (r.deadline_at IS NULL OR r.deadline_at > coalesce(%(now)s::timestamptz, now()))
  AND (%(definition_ids)s::uuid[] IS NULL OR r.definition_id = ANY(%(definition_ids)s::uuid[]))
ORDER BY r.scheduled_for, r.id
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED;

-- name: lock_definitions
SELECT pgsched.lock_definitions_for_dispatch(%(definition_ids)s::uuid[]);

-- name: dispatch_limits
-- Read after the advisory locks: no other dispatcher is mid-claim for these definitions,
-- so the live RUNNING count includes every claim that matters.
SELECT d.id, d.max_concurrent_runs, d.concurrency_policy, d.deleted_at IS NOT NULL AS deleted,
       r.running, r.stopping
FROM pgsched.job_definitions AS d
CROSS JOIN LATERAL (
    SELECT count(*) AS running, count(*) FILTER (WHERE cancel_requested) AS stopping
    FROM pgsched.job_runs
    WHERE definition_id = d.id AND status = 'RUNNING'
) AS r
WHERE d.id = ANY(%(definition_ids)s::uuid[]);

-- name: claim_runs
-- clock_timestamp(), not now(): the claim happens after the locks were granted, so
-- started_at is later than the finished_at of any run whose end made room for it.
UPDATE pgsched.job_runs
SET status = 'RUNNING',
    started_at = coalesce(%(now)s::timestamptz, clock_timestamp()),
    lease_token = gen_random_uuid()
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'QUEUED'
RETURNING *;

-- name: skip_runs
UPDATE pgsched.job_runs
SET status = 'SKIPPED', reason = %(reason)s, error = %(error)s,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    settled_at = coalesce(%(now)s::timestamptz, now())
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'QUEUED';

-- name: cancel_oldest_running
-- concurrencyPolicy Replace: ask the oldest running runs to stop to make room.
UPDATE pgsched.job_runs
SET cancel_requested = true, cancel_requested_at = coalesce(%(now)s::timestamptz, now())
WHERE id IN (
    SELECT id FROM pgsched.job_runs
    WHERE definition_id = %(definition_id)s AND status = 'RUNNING' AND NOT cancel_requested
    ORDER BY started_at, id
    LIMIT %(count)s
)
RETURNING id;

-- name: record_launch
UPDATE pgsched.job_runs SET k8s_job_name = %(handle)s
WHERE id = %(id)s AND status = 'RUNNING' AND lease_token = %(lease_token)s;
