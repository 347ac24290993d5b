-- Trigger: a run's status change becomes the notifications its job's effective notify
-- configuration asks for. A target without an `events` list gets every event but
-- `skipped`: a skip is a plan (a suspension, a calendar's holiday, a concurrency policy)
-- more often than trouble, so it is sent only to a target that lists it.

CREATE OR REPLACE FUNCTION pgsched.derive_notifications() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO pgsched.notifications
        (idempotency_key, definition_id, namespace, name, run_id, event, target_name, target,
         payload)
    SELECT format('%s/%s/%s/%s', e.definition_id, e.run_id, e.event, t.target->>'name'),
           e.definition_id, e.namespace, e.name, e.run_id, e.event, t.target->>'name', t.target,
           jsonb_build_object(
               'event', e.event,
               'idempotencyKey',
               format('%s/%s/%s/%s', e.definition_id, e.run_id, e.event, t.target->>'name'),
               'occurredAt', e.at,
               'scheduledJob', jsonb_build_object(
                   'namespace', e.namespace, 'name', e.name, 'uid', e.definition_id),
               'run', jsonb_build_object(
                   'id', e.run_id, 'attempt', e.attempt, 'trigger', e.trigger,
                   'status', r.status, 'reason', e.reason, 'error', left(r.error, 2000),
                   'scheduledFor', r.scheduled_for, 'startedAt', r.started_at,
                   'finishedAt', r.finished_at, 'retryOf', r.retry_of,
                   'deadlineAt', m.deadline_at))
    FROM (
        SELECT c.id, c.run_id, c.definition_id, c.reason, c.attempt, c.trigger, c.at,
               c.namespace, c.name, c.notify,
               CASE c.status
                   WHEN 'FAILED' THEN CASE WHEN c.notify->>'failedOn' = 'EachAttempt'
                                           THEN 'failed' END
                   WHEN 'NOT_RETRIED' THEN CASE WHEN c.notify->>'failedOn' = 'EachAttempt'
                                                THEN NULL ELSE 'failed' END
                   WHEN 'QUEUED' THEN 'retried'
                   WHEN 'AUTO_SUSPENDED' THEN 'autoSuspended'
                   WHEN 'SKIPPED' THEN 'skipped'
                   WHEN 'COMPLETED' THEN CASE WHEN c.attempt > 1 OR c.consecutive_failures > 0
                                              THEN 'recovered' END
                   WHEN 'DEADLINE_MISSED' THEN 'deadlineMissed'
               END AS event
        FROM (
            SELECT n.id, n.run_id, n.definition_id, n.reason, n.attempt, n.trigger, n.at,
                   n.status, d.namespace, d.name, d.consecutive_failures,
                   pgsched.effective_notify(d.spec->'notify', p.notify) AS notify
            FROM new_rows AS n
            JOIN pgsched.job_definitions AS d ON d.id = n.definition_id
            LEFT JOIN pgsched.notification_policies AS p ON p.namespace = d.namespace
            WHERE n.status IN ('FAILED', 'NOT_RETRIED', 'QUEUED', 'AUTO_SUSPENDED', 'SKIPPED',
                               'COMPLETED', 'DEADLINE_MISSED')
              AND (n.status <> 'QUEUED' OR n.trigger = 'retry')
              AND (d.spec ? 'notify' OR p.namespace IS NOT NULL)
        ) AS c
    ) AS e
    CROSS JOIN LATERAL jsonb_array_elements(e.notify->'targets') AS t(target)
    JOIN pgsched.job_runs AS r ON r.id = e.run_id
    LEFT JOIN pgsched.run_deadlines AS m ON m.run_id = e.run_id
    WHERE e.event IS NOT NULL
      AND CASE WHEN t.target ? 'events' THEN t.target->'events' ? e.event
               ELSE e.event <> 'skipped' END
    ORDER BY e.id, t.target->>'name'
    ON CONFLICT (idempotency_key) DO NOTHING;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.derive_notifications() FROM PUBLIC;
