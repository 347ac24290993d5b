-- Notifications (issue 28, pgsched/engine/notifications.py, pgsched/k8s/notifier.py) and
-- finish-by deadlines (pgsched/engine/deadlines.py).
--
-- An outbox of its own, derived in the database from the run-events outbox. Every state
-- change that can notify (a run failed, was retried, skipped or succeeded; a definition
-- was auto-suspended; a run missed its finish-by deadline) already writes a row to
-- pgsched.run_events in the transaction that makes the change: triggers on job_runs for
-- run statuses, settle's notes (NOT_RETRIED, AUTO_SUSPENDED), the deadline service's
-- DEADLINE_MISSED note. A trigger on run_events turns those rows into notification rows, one
-- per matching target of the ScheduledJob's spec.notify, in that same transaction. So no
-- code path can change a run without its notifications, nor notify of a change that rolled
-- back, and the run-events publisher (which deletes what it published) is not in the way:
-- notifications have their own lifecycle (PENDING -> DELIVERED | DEAD), their own claims and
-- their own retention.
--
-- The idempotency key (definition uid / run id / event / target) is unique: a change seen
-- twice (a repeated note) yields one notification, and the key is what receivers get as
-- `Idempotency-Key` and CloudEvents `id`, the same on every redelivery.
--
-- `target` and `payload` are snapshots taken when the change happened: a spec edited later
-- does not rewrite what a pending notification says or where it goes.

CREATE TABLE pgsched.notifications (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    definition_id   uuid        NOT NULL,
    namespace       text        NOT NULL,
    name            text        NOT NULL,
    run_id          bigint      NOT NULL,
    event           text        NOT NULL,
    target_name     text        NOT NULL,
    target          jsonb       NOT NULL,
    payload         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    state           text        NOT NULL DEFAULT 'PENDING'
                                CHECK (state IN ('PENDING', 'DELIVERED', 'DEAD')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz, -- NULL: at once (not yet attempted)
    leased_until    timestamptz,
    lease_token     uuid,
    last_error      text,
    finished_at     timestamptz
);

-- The head of each (ScheduledJob, target) line: delivery is in order per line.
CREATE INDEX notifications_pending ON pgsched.notifications (definition_id, target_name, id)
    WHERE state = 'PENDING';
CREATE INDEX notifications_dead ON pgsched.notifications (namespace, id) WHERE state = 'DEAD';
CREATE INDEX notifications_finished ON pgsched.notifications (finished_at)
    WHERE state <> 'PENDING';
REVOKE ALL ON TABLE pgsched.notifications FROM PUBLIC;

-- Finish-by deadlines missed: one row per run (the deadline service's mark, written with
-- the DEADLINE_MISSED note in one statement). A table of its own, not a column of the
-- partitioned job_runs (see 0023 on prepared row types); rows of dropped months are
-- deleted with the run starts.
CREATE TABLE pgsched.run_deadlines (
    run_id      bigint      PRIMARY KEY,
    deadline_at timestamptz NOT NULL,
    missed_at   timestamptz NOT NULL
);
REVOKE ALL ON TABLE pgsched.run_deadlines FROM PUBLIC;

-- The finish-by instant of a run scheduled for `scheduled_for` under spec.deadline: a
-- duration after it ('2h', '90m', '1h30m'), or the first wall-clock time ('06:00') strictly
-- after it in the schedule's zone. NULL without a deadline. The spec is validated before
-- it is stored (pgsched.engine.deadlines), so the casts cannot fail.
CREATE FUNCTION pgsched.finish_by(deadline text, scheduled_for timestamptz, zone text)
    RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE
        WHEN deadline IS NULL THEN NULL
        WHEN deadline ~ '^[0-9]{2}:[0-9]{2}$' THEN (
            SELECT CASE WHEN candidate > scheduled_for THEN candidate
                        ELSE ((local_day + 1) + deadline::time) AT TIME ZONE zone END
            FROM (SELECT (scheduled_for AT TIME ZONE zone)::date AS local_day) AS d,
                 LATERAL (SELECT (d.local_day + deadline::time) AT TIME ZONE zone AS candidate) AS c)
        ELSE scheduled_for + deadline::interval
    END
$$;
REVOKE ALL ON FUNCTION pgsched.finish_by(text, timestamptz, text) FROM PUBLIC;

CREATE FUNCTION pgsched.derive_notifications() RETURNS trigger
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
        SELECT n.id, n.run_id, n.definition_id, n.reason, n.attempt, n.trigger, n.at,
               d.namespace, d.name, d.spec->'notify' AS notify,
               CASE n.status
                   WHEN 'FAILED' THEN CASE WHEN d.spec->'notify'->>'failedOn' = 'EachAttempt'
                                           THEN 'failed' END
                   WHEN 'NOT_RETRIED' THEN CASE WHEN d.spec->'notify'->>'failedOn' = 'EachAttempt'
                                                THEN NULL ELSE 'failed' END
                   WHEN 'QUEUED' THEN 'retried'
                   WHEN 'AUTO_SUSPENDED' THEN 'autoSuspended'
                   WHEN 'SKIPPED' THEN 'skipped'
                   WHEN 'COMPLETED' THEN CASE WHEN n.attempt > 1 OR d.consecutive_failures > 0
                                              THEN 'recovered' END
                   WHEN 'DEADLINE_MISSED' THEN 'deadlineMissed'
               END AS event
        FROM new_rows AS n
        JOIN pgsched.job_definitions AS d ON d.id = n.definition_id
        WHERE n.status IN ('FAILED', 'NOT_RETRIED', 'QUEUED', 'AUTO_SUSPENDED', 'SKIPPED',
                           'COMPLETED', 'DEADLINE_MISSED')
          AND (n.status <> 'QUEUED' OR n.trigger = 'retry')
          AND d.spec ? 'notify'
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
REVOKE ALL ON FUNCTION pgsched.derive_notifications() FROM PUBLIC;

CREATE TRIGGER run_events_notify
    AFTER INSERT ON pgsched.run_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.derive_notifications();
