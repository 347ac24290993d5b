-- Notifications (pgsched/engine/notifications.py): the outbox, pgsched.notifications, is
-- filled by the trigger run_events_notify (pgsched.derive_notifications); these claim,
-- settle and show its rows.

-- name: claim_notifications
-- Up to %(limit)s due notifications, each the head of its (ScheduledJob, target) line, so
-- a line is delivered in order: its next row waits until the head is DELIVERED or DEAD.
-- A claim is a lease (no transaction is held while a receiver answers): another replica
-- sees the head leased and takes nothing of that line; SKIP LOCKED keeps two claims of
-- the same moment apart. A lease that runs out (its replica died) is claimed again.
WITH heads AS (
    SELECT DISTINCT ON (n.definition_id, n.target_name) n.id
    FROM pgsched.notifications AS n
    WHERE n.state = 'PENDING'
    ORDER BY n.definition_id, n.target_name, n.id
), due AS (
    SELECT n.id
    FROM heads AS h
    JOIN pgsched.notifications AS n ON n.id = h.id
    WHERE (n.next_attempt_at IS NULL OR n.next_attempt_at <= coalesce(%(now)s::timestamptz, now()))
      AND (n.leased_until IS NULL OR n.leased_until <= coalesce(%(now)s::timestamptz, now()))
    ORDER BY n.next_attempt_at NULLS FIRST, n.id
    LIMIT %(limit)s
    FOR UPDATE OF n SKIP LOCKED
)
UPDATE pgsched.notifications AS n
SET leased_until = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease_seconds)s),
    lease_token = gen_random_uuid()
FROM due
WHERE n.id = due.id
RETURNING n.id, n.idempotency_key, n.namespace, n.name, n.event, n.target_name, n.target,
          n.payload, n.attempts, n.lease_token;

-- name: notification_delivered
UPDATE pgsched.notifications
SET state = 'DELIVERED', attempts = attempts + 1, last_error = NULL, leased_until = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND state = 'PENDING' AND lease_token = %(lease_token)s
RETURNING id;

-- name: notification_failed
-- A failed attempt: retried at %(retry_at)s, or DEAD (a dead letter) once it was the last
-- allowed (%(max_attempts)s) or the receiver refused it for good (%(final)s).
UPDATE pgsched.notifications
SET attempts = attempts + 1, last_error = left(%(error)s, 1000), leased_until = NULL,
    next_attempt_at = %(retry_at)s,
    state = CASE WHEN %(final)s OR attempts + 1 >= %(max_attempts)s THEN 'DEAD' ELSE 'PENDING' END,
    finished_at = CASE WHEN %(final)s OR attempts + 1 >= %(max_attempts)s
                       THEN coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(id)s AND state = 'PENDING' AND lease_token = %(lease_token)s
RETURNING id, state;

-- name: notification_deferred
-- Not attempted (the receiver's host is at its rate or concurrency bound): back in line.
UPDATE pgsched.notifications
SET leased_until = NULL, next_attempt_at = %(retry_at)s
WHERE id = %(id)s AND state = 'PENDING' AND lease_token = %(lease_token)s
RETURNING id;

-- name: forget_finished_notifications
-- Delivered and dead notifications older than the retention (dead letters stay that long
-- for `pgsched doctor` and the metric).
DELETE FROM pgsched.notifications
WHERE state <> 'PENDING'
  AND finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(retention_seconds)s);

-- name: dead_notifications
SELECT n.namespace, n.name, n.run_id, n.event, n.target_name, n.attempts, n.last_error,
       n.finished_at, n.idempotency_key
FROM pgsched.notifications AS n
WHERE n.state = 'DEAD'
ORDER BY n.id DESC
LIMIT %(limit)s;

-- name: dead_notification_counts
SELECT n.namespace, count(*) AS dead
FROM pgsched.notifications AS n
WHERE n.state = 'DEAD'
GROUP BY n.namespace;

-- name: notifications_of_run
SELECT * FROM pgsched.notifications WHERE run_id = %(run_id)s ORDER BY id;

-- name: mark_missed_deadlines
-- Unfinished runs past their finish-by instant (spec.deadline), each marked once, with a
-- DEADLINE_MISSED note on the run-events outbox (a Warning Event, and a deadlineMissed
-- notification through the outbox's trigger) in the same statement. The run goes on.
WITH missed AS (
    SELECT r.id, r.definition_id, r.attempt, r.trigger, r.scheduled_for,
           pgsched.finish_by(d.spec->>'deadline', r.scheduled_for, d.time_zone) AS deadline_at
    FROM pgsched.job_runs AS r
    JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
    WHERE r.status IN ('QUEUED', 'RUNNING')
      AND d.spec ? 'deadline'
      AND NOT EXISTS (SELECT FROM pgsched.run_deadlines AS m WHERE m.run_id = r.id)
), marked AS (
    INSERT INTO pgsched.run_deadlines (run_id, deadline_at, missed_at)
    SELECT m.id, m.deadline_at, coalesce(%(now)s::timestamptz, now())
    FROM missed AS m
    WHERE m.deadline_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY m.id
    LIMIT %(limit)s
    ON CONFLICT (run_id) DO NOTHING
    RETURNING run_id, deadline_at
)
INSERT INTO pgsched.run_events
    (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
SELECT m.id, m.definition_id, 'DEADLINE_MISSED', 'FinishDeadlineMissed', m.attempt, m.trigger,
       m.scheduled_for
FROM marked AS k
JOIN missed AS m ON m.id = k.run_id
RETURNING run_id;

-- name: runs_finish_by
-- The finish-by instant of runs of jobs with spec.deadline (the marked one once missed:
-- the spec may have changed since), with when it was found missed.
SELECT r.id AS run_id,
       coalesce(m.deadline_at,
                pgsched.finish_by(d.spec->>'deadline', r.scheduled_for, d.time_zone))
           AS deadline_at,
       m.missed_at
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
LEFT JOIN pgsched.run_deadlines AS m ON m.run_id = r.id
WHERE r.id = ANY(%(run_ids)s)
  AND (d.spec ? 'deadline' OR m.run_id IS NOT NULL);

-- name: forget_deadlines_of_dropped_runs
-- Marks of runs whose history month was dropped (engine/history.py).
DELETE FROM pgsched.run_deadlines AS m
WHERE NOT EXISTS (SELECT FROM pgsched.job_runs AS r WHERE r.id = m.run_id);

-- name: upsert_notification_policy
-- A namespace's NotificationPolicy `default` (notification_policies), its validated spec.
-- Returns nothing when the stored form is already this one, else the form it replaced
-- (NULL for a new policy): the statuses to render again depend on what changed.
WITH previous AS (
    SELECT notify FROM pgsched.notification_policies WHERE namespace = %(namespace)s
)
INSERT INTO pgsched.notification_policies AS p (namespace, notify, updated_at)
VALUES (%(namespace)s, %(notify)s, coalesce(%(now)s, now()))
ON CONFLICT (namespace) DO UPDATE
SET notify = EXCLUDED.notify, version = p.version + 1, updated_at = EXCLUDED.updated_at
WHERE p.notify IS DISTINCT FROM EXCLUDED.notify
RETURNING version, (SELECT notify FROM previous) AS previous;

-- name: delete_notification_policy
DELETE FROM pgsched.notification_policies WHERE namespace = %(namespace)s
RETURNING version;

-- name: notification_policy_members
-- The live jobs of a namespace whose effective notifications depend on its policy: those
-- without spec.notify and those that inherit (their statuses say where they come from).
SELECT d.id FROM pgsched.job_definitions AS d
WHERE d.namespace = %(namespace)s
  AND d.deleted_at IS NULL
  AND (coalesce(d.spec -> 'notify', 'null') = 'null'
       OR d.spec -> 'notify' ->> 'inherit' = 'true')
ORDER BY d.id;

-- name: effective_notify
-- What a job's changes notify, and where that comes from (pgsched.effective_notify);
-- NULL when nothing does.
SELECT pgsched.effective_notify(d.spec -> 'notify', p.notify) AS notify
FROM pgsched.job_definitions AS d
LEFT JOIN pgsched.notification_policies AS p ON p.namespace = d.namespace
WHERE d.id = %(definition_id)s;
