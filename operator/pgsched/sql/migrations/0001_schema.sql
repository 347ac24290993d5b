-- pgsched schema, version 1.
--
-- Everything lives in the "pgsched" schema so the operator can share a database with
-- other applications. All SQL in pgsched names its objects schema-qualified, so nothing
-- depends on the caller's search_path (important for the SECURITY DEFINER functions).

-- Durable intent: one row per ScheduledJob, keyed by the resource's uid.
CREATE TABLE pgsched.job_definitions (
    id                          uuid PRIMARY KEY,
    namespace                   text        NOT NULL,
    name                        text        NOT NULL,
    generation                  bigint      NOT NULL DEFAULT 0,
    schedule_kind               text        NOT NULL CHECK (schedule_kind IN ('cron', 'rrule', 'once')),
    schedule                    text        NOT NULL,
    time_zone                   text        NOT NULL DEFAULT 'UTC',
    dst_gap                     text        NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('shift', 'skip')),
    dst_repeat                  text        NOT NULL DEFAULT 'first' CHECK (dst_repeat IN ('first', 'last', 'both')),
    -- The RRULE's DTSTART day when the rule gives none: the resource's creation time.
    anchor                      timestamptz NOT NULL,
    catch_up                    text        NOT NULL DEFAULT 'latest' CHECK (catch_up IN ('latest', 'all', 'none')),
    catch_up_limit              integer     NOT NULL DEFAULT 100 CHECK (catch_up_limit > 0),
    starting_deadline_seconds   integer     CHECK (starting_deadline_seconds > 0),
    max_concurrent_runs         integer     NOT NULL DEFAULT 1 CHECK (max_concurrent_runs > 0),
    concurrency_policy          text        NOT NULL DEFAULT 'Queue' CHECK (concurrency_policy IN ('Queue', 'Skip', 'Replace')),
    active_deadline_seconds     integer     CHECK (active_deadline_seconds > 0),
    retry_policy                jsonb       NOT NULL DEFAULT '{}',
    heartbeat_interval_seconds  integer     NOT NULL DEFAULT 10 CHECK (heartbeat_interval_seconds > 0),
    heartbeat_timeout_seconds   integer     NOT NULL DEFAULT 60 CHECK (heartbeat_timeout_seconds > 0),
    orphan_timeout_seconds      integer     NOT NULL DEFAULT 300 CHECK (orphan_timeout_seconds > 0),
    cancel_grace_seconds        integer     NOT NULL DEFAULT 30 CHECK (cancel_grace_seconds >= 0),
    failure_suspend_threshold   integer     CHECK (failure_suspend_threshold > 0),
    consecutive_failures        integer     NOT NULL DEFAULT 0,
    suspended                   boolean     NOT NULL DEFAULT false,
    auto_suspended_at           timestamptz,
    auto_suspend_reason         text,
    -- The validated spec as applied (job template, SDK job, history limits, ...).
    spec                        jsonb       NOT NULL DEFAULT '{}',
    -- The next occurrence to materialize; NULL when there is none (a fired one-shot).
    next_run_at                 timestamptz,
    last_scheduled_for          timestamptz,
    deleted_at                  timestamptz,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- Materialization scans due definitions; deleted ones never are.
CREATE INDEX job_definitions_due ON pgsched.job_definitions (next_run_at)
    WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX job_definitions_live_name ON pgsched.job_definitions (namespace, name)
    WHERE deleted_at IS NULL;

-- One execution attempt. A retry is a new row; a row is never rewritten into another attempt.
CREATE TABLE pgsched.job_runs (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    definition_id       uuid        NOT NULL REFERENCES pgsched.job_definitions (id),
    status              text        NOT NULL CHECK (status IN
                            ('QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'SKIPPED')),
    trigger             text        NOT NULL CHECK (trigger IN ('schedule', 'manual', 'retry', 'backfill')),
    scheduled_for       timestamptz NOT NULL,
    -- startingDeadlineSeconds: a run still QUEUED at this instant becomes SKIPPED/DeadlineMissed.
    deadline_at         timestamptz,
    attempt             integer     NOT NULL DEFAULT 1 CHECK (attempt > 0),
    retry_of            bigint      REFERENCES pgsched.job_runs (id),
    request_token       text,
    lease_token         uuid,
    started_at          timestamptz,
    heartbeat_at        timestamptz,
    finished_at         timestamptz,
    cancel_requested    boolean     NOT NULL DEFAULT false,
    cancel_requested_at timestamptz,
    reason              text,
    error               text,
    exit_code           integer,
    -- Set by the job SDK runner from the job kind's exception lists: 'never' vetoes a retry.
    retry_hint          text        CHECK (retry_hint IN ('retry', 'never')),
    k8s_job_name        text,
    -- When the engine applied the consequences of the terminal status (retry, failure streak).
    settled_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_runs_running_has_lease CHECK (status <> 'RUNNING' OR lease_token IS NOT NULL)
);

-- I1: an occurrence is materialized at most once (retries and manual runs have their own keys).
CREATE UNIQUE INDEX job_runs_occurrence_key ON pgsched.job_runs (definition_id, scheduled_for, trigger)
    WHERE trigger IN ('schedule', 'backfill');
-- A failed attempt is retried at most once.
CREATE UNIQUE INDEX job_runs_retry_key ON pgsched.job_runs (retry_of)
    WHERE retry_of IS NOT NULL;
-- Run-now requests are idempotent per token.
CREATE UNIQUE INDEX job_runs_request_key ON pgsched.job_runs (definition_id, request_token)
    WHERE request_token IS NOT NULL;
-- The claim query: due QUEUED rows in scheduled order. Partial, so finished history
-- (the vast majority of rows) never enters the index.
CREATE INDEX job_runs_queued ON pgsched.job_runs (scheduled_for, id)
    WHERE status = 'QUEUED';
-- Running counts for caps, and the reaper's scans.
CREATE INDEX job_runs_running ON pgsched.job_runs (definition_id)
    WHERE status = 'RUNNING';
-- Terminal runs whose consequences are not applied yet.
CREATE INDEX job_runs_unsettled ON pgsched.job_runs (id)
    WHERE settled_at IS NULL AND status IN ('COMPLETED', 'FAILED', 'CANCELLED');
-- History per definition, newest first.
CREATE INDEX job_runs_history ON pgsched.job_runs (definition_id, id DESC);

-- Dispatch serializes claimers per definition with transaction-scoped advisory locks.
-- The keys are taken in ascending key order, one statement, inside the function, so every
-- claimer acquires any common subset in the same order: no deadlock, even if two
-- definitions' keys ever collided.
CREATE FUNCTION pgsched.lock_definitions_for_dispatch(definition_ids uuid[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lock_key bigint;
BEGIN
    FOR lock_key IN
        SELECT DISTINCT hashtextextended('dispatch:' || d::text, 0)
        FROM unnest(definition_ids) AS d
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
END;
$$;

-- The job side: heartbeat, lease state and finish, fenced by the lease token. A late or
-- zombie caller (reaped, cancelled, retried) updates zero rows and learns it lost the lease.
-- SECURITY DEFINER with a fixed search_path, so job pods can be given a role that may
-- call these and nothing else (see 0002).
CREATE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid, at timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH beat AS (
        UPDATE pgsched.job_runs
        SET heartbeat_at = coalesce(at, now())
        WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease
        RETURNING cancel_requested
    )
    SELECT coalesce((SELECT CASE WHEN cancel_requested THEN 'cancel_requested' ELSE 'active' END
                     FROM beat), 'lost');
$$;

CREATE FUNCTION pgsched.lease_state(run_id bigint, lease uuid)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT CASE WHEN cancel_requested THEN 'cancel_requested' ELSE 'active' END
                     FROM pgsched.job_runs
                     WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease), 'lost');
$$;

CREATE FUNCTION pgsched.finish_run(
    run_id bigint,
    lease uuid,
    final_status text,
    final_reason text DEFAULT NULL,
    final_error text DEFAULT NULL,
    final_exit_code integer DEFAULT NULL,
    final_retry_hint text DEFAULT NULL,
    at timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF final_status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION 'finish_run: status % is not terminal (COMPLETED, FAILED or CANCELLED)',
            final_status USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- clock_timestamp(), not now(): a claim that waited for this commit must see a
    -- finished_at earlier than its own started_at, or run intervals would seem to overlap.
    UPDATE pgsched.job_runs
    SET status = final_status,
        reason = final_reason,
        error = final_error,
        exit_code = final_exit_code,
        retry_hint = final_retry_hint,
        finished_at = coalesce(at, clock_timestamp())
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease;
    RETURN FOUND;
END;
$$;
