-- NotificationPolicy: a namespace's default notifications (k8s/notificationpolicies.py,
-- engine/notifications.py, docs/notifications.md "A namespace's default").
--
-- A namespace has at most one policy in force: the NotificationPolicy named `default`
-- (the CRD, the admission webhook and the controller refuse any other name), stored here
-- as its validated spec, which has the shape of a ScheduledJob's spec.notify. The trigger
-- of 0024 now derives notifications from a job's *effective* configuration, computed by
-- pgsched.effective_notify from the job's own spec.notify and its namespace's policy:
--
--   no spec.notify                       the policy (none without one)
--   spec.notify with targets             the job's own; the policy is not used (replace)
--   spec.notify.inherit: true            the policy's targets and the job's own; a job
--                                        target of the same name replaces the policy's;
--                                        failedOn: the job's if set, else the policy's
--   spec.notify.inherit: false, no targets   nothing (the job opts out)
--
-- The policy is read when a change happens, so a policy applied, edited or deleted counts
-- from the next change on, with nothing to restart; notifications already in the outbox
-- keep the target and payload they were written with (0024's snapshot rule). The join is
-- on the job's own namespace: a policy never reaches another namespace's jobs, and the
-- notification rows carry the job's namespace, from which the notifier reads Secrets.
--
-- `source` in the result says where the configuration comes from, for the job's status
-- and `pgsched describe`; the trigger reads only failedOn and targets.

CREATE TABLE pgsched.notification_policies (
    namespace  text        PRIMARY KEY,
    notify     jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON TABLE pgsched.notification_policies FROM PUBLIC;

CREATE FUNCTION pgsched.effective_notify(own_notify jsonb, policy jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE
        WHEN own IS NULL THEN
            CASE WHEN policy IS NOT NULL THEN
                jsonb_build_object('failedOn', coalesce(policy->'failedOn', '"FinalAttempt"'),
                                   'targets', policy->'targets',
                                   'source', 'NotificationPolicy default') END
        WHEN (own->>'inherit') IS DISTINCT FROM 'true' THEN
            CASE WHEN own ? 'targets' THEN
                jsonb_build_object('failedOn', coalesce(own->'failedOn', '"FinalAttempt"'),
                                   'targets', own->'targets', 'source', 'spec.notify')
            ELSE jsonb_build_object('failedOn', '"FinalAttempt"'::jsonb, 'targets', '[]'::jsonb,
                                    'source', 'none (spec.notify.inherit: false)') END
        ELSE jsonb_build_object(
            'failedOn', coalesce(own->'failedOn', policy->'failedOn', '"FinalAttempt"'),
            'targets', (
                SELECT coalesce(jsonb_agg(t.target ORDER BY t.side, t.position), '[]'::jsonb)
                FROM (
                    SELECT 1 AS side, p.position, p.target
                    FROM jsonb_array_elements(coalesce(policy->'targets', '[]'::jsonb))
                         WITH ORDINALITY AS p(target, position)
                    WHERE NOT EXISTS (
                        SELECT FROM jsonb_array_elements(coalesce(own->'targets', '[]'::jsonb))
                            AS o(target)
                        WHERE o.target->>'name' = p.target->>'name')
                    UNION ALL
                    SELECT 2, o.position, o.target
                    FROM jsonb_array_elements(coalesce(own->'targets', '[]'::jsonb))
                         WITH ORDINALITY AS o(target, position)
                ) AS t),
            'source', CASE WHEN policy IS NULL
                           THEN 'spec.notify (inherit: true, but no NotificationPolicy default)'
                           ELSE 'spec.notify and NotificationPolicy default' END)
    END
    -- A JSON null (`notify: null` stored by a client that kept it) is no spec.notify.
    FROM (SELECT nullif(own_notify, 'null'::jsonb) AS own) AS o
$$;
REVOKE ALL ON FUNCTION pgsched.effective_notify(jsonb, jsonb) FROM PUBLIC;

-- 0024's function with the effective configuration in place of d.spec->'notify'.
CREATE OR REPLACE FUNCTION pgsched.derive_notifications() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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
      AND (NOT t.target ? 'events' OR t.target->'events' ? e.event)
    ORDER BY e.id, t.target->>'name'
    ON CONFLICT (idempotency_key) DO NOTHING;
    RETURN NULL;
END;
$$;
