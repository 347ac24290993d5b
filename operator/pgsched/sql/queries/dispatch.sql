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

-- name: lock_and_count
-- Blocking, in key order: the definitions of the earliest candidates.
SELECT * FROM pgsched.lock_and_count_for_dispatch(%(definition_ids)s::uuid[]);

-- name: try_lock_and_count
-- Never waiting: the further candidates' definitions, when caps left the batch short.
SELECT * FROM pgsched.try_lock_and_count_for_dispatch(%(definition_ids)s::uuid[]);

-- name: count_without_locks
-- Test-only: the chaos self-test proves the checker catches what skipping the locks allows.
SELECT * FROM pgsched.dispatch_counts(%(definition_ids)s::uuid[]);

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

-- name: record_launches
UPDATE pgsched.job_runs AS r SET k8s_job_name = l.handle
FROM unnest(%(ids)s::bigint[], %(lease_tokens)s::uuid[], %(handles)s::text[]) AS l(id, lease_token, handle)
WHERE r.id = l.id AND r.status = 'RUNNING' AND r.lease_token = l.lease_token;
