-- The trust boundary between job pods and the scheduler (issue 25).
--
-- A job pod runs arbitrary code with the job role's login. Until now it could:
--   * forge time: heartbeat, finish_run and workload_ended took a caller-supplied `at`, so
--     `finish_run(..., at => 'infinity')` stored a finished_at no reader could load (the
--     settle phase, and with it every tick's dispatch, failed until the row was repaired),
--     and `heartbeat(..., 'infinity')` kept a run out of reaping for ever;
--   * store unbounded text: a 2 MiB reason ends up in a ScheduledJob's status, which the
--     API server refuses, and the publisher retried its whole batch;
--   * block leader election and migrations by holding their advisory lock keys (any login
--     may call pg_advisory_lock; keys are visible to all in pg_locks);
--   * call functions that PUBLIC could still execute (a function created without its own
--     REVOKE is PUBLIC's: ALTER DEFAULT PRIVILEGES IN SCHEMA cannot revoke that default).
--
-- After this migration:
--   * The job-callable functions take no time at all: `heartbeat(run, lease)`,
--     `workload_ended(run, lease)` and `finish_run(run, lease, status, reason, error,
--     exit_code, retry_hint)` stamp the database clock. The operator and tests that pin
--     "now" use `*_pinned` variants with an `at`, which only the owner may execute.
--   * Rolling upgrade: job pods of the previous release still call the old signatures
--     (with a trailing `at`). Those stay callable by pgsched_job for one release, but the
--     `at` they pass is ignored: the database clock is used. A pod of the old release
--     therefore keeps heartbeating and finishing normally, and no job can store a time of
--     its choosing. They will be dropped by a later migration (docs/operations.md).
--   * `finish_run` from the job role accepts a reason that is a short identifier
--     (^[A-Za-z][A-Za-z0-9_.]{0,63}$), an exit code in 0..255 and a retry hint of
--     'retry' | 'never'; anything else is refused with a precise error and changes
--     nothing. Error text longer than 8 KiB is cut to 8 KiB ending in a marker.
--   * Values a job could have stored before are repaired once, here, so no reader meets
--     them: non-finite or future times, finished_at before started_at, oversized text.
--   * Leader election takes a row of pgsched.leader_locks, migrations the ledger's table
--     lock: only roles with privileges on pgsched's tables can take either (see
--     docs/architecture.md, "Locks no tenant can take").
--   * EXECUTE is revoked from PUBLIC on every function in the schema, and the owner's
--     global default privileges no longer grant EXECUTE to PUBLIC on new functions.
--   * Job-callable functions wait at most 5 s for a lock (their SET lock_timeout): a call
--     stuck behind a migration gives up instead of queueing everyone behind it.

-- -- Leader election ------------------------------------------------------------------------

-- One row per leader lock name (TickSettings.lock_name): the session that leads the
-- current tick (its backend pid and start, so a dead or replaced backend holds nothing)
-- and until when, should it freeze. Only roles with privileges on this table can take
-- it, and the job role has none (sql/queries/leader.sql, docs/architecture.md).
CREATE TABLE pgsched.leader_locks (
    name           text PRIMARY KEY,
    holder_pid     integer,
    holder_started timestamptz,
    held_until     timestamptz
);
INSERT INTO pgsched.leader_locks (name) VALUES ('pgsched:tick-leader');
REVOKE ALL ON TABLE pgsched.leader_locks FROM PUBLIC;

-- Take the leader row for this session unless another live session holds it: held rows
-- expire (a frozen leader), and a holder whose backend is gone (crashed, killed, on
-- another server after a failover) holds nothing. Waits only for another replica's own
-- try of the same row. The database clock on purpose: a test's pinned "now" must not
-- decide which replica leads.
CREATE FUNCTION pgsched.try_lead(lock_name text, hold_seconds double precision)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pgsched.leader_locks AS l (name, holder_pid, holder_started, held_until)
    SELECT lock_name, a.pid, a.backend_start,
           pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => hold_seconds)
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid = pg_catalog.pg_backend_pid()
    ON CONFLICT (name) DO UPDATE
    SET holder_pid = excluded.holder_pid,
        holder_started = excluded.holder_started,
        held_until = excluded.held_until
    WHERE l.holder_pid IS NULL
       OR l.held_until < pg_catalog.clock_timestamp()
       OR NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS h
                      WHERE h.pid = l.holder_pid AND h.backend_start = l.holder_started
                        AND h.pid <> pg_catalog.pg_backend_pid())
    RETURNING true;
$$;

-- -- Bounded text ---------------------------------------------------------------------------

-- Error text cut to at most 8 KiB (bytes, UTF-8) ending in a marker; shorter text as is.
CREATE FUNCTION pgsched.bounded_error(error text) RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    marker constant text := ' [... truncated by pgsched to 8 KiB]';
    budget constant integer := 8192 - pg_catalog.octet_length(marker);
    kept text;
BEGIN
    IF error IS NULL OR pg_catalog.octet_length(error) <= 8192 THEN
        RETURN error;
    END IF;
    kept := pg_catalog.left(error, budget);
    -- Characters take 1..4 bytes: drop at least a quarter of the excess each round.
    WHILE pg_catalog.octet_length(kept) > budget LOOP
        kept := pg_catalog.left(
            kept, pg_catalog.length(kept) - (pg_catalog.octet_length(kept) - budget + 3) / 4);
    END LOOP;
    RETURN kept || marker;
END;
$$;

-- -- The operator's (owner-only) variants, with a pinned time -------------------------------

CREATE FUNCTION pgsched.heartbeat_pinned(run_id bigint, lease uuid, at timestamptz)
RETURNS text
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH beat AS (
        UPDATE pgsched.job_runs
        SET heartbeat_at = at
        WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease
        RETURNING cancel_requested
    )
    SELECT coalesce((SELECT CASE WHEN cancel_requested THEN 'cancel_requested' ELSE 'active' END
                     FROM beat), 'lost');
$$;

CREATE FUNCTION pgsched.workload_ended_pinned(run_id bigint, lease uuid, at timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgsched.job_runs
    SET workload_ended_at = coalesce(workload_ended_at, at)
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease;
    RETURN FOUND;
END;
$$;

CREATE FUNCTION pgsched.finish_run_pinned(
    run_id bigint,
    lease uuid,
    final_status text,
    final_reason text,
    final_error text,
    final_exit_code integer,
    final_retry_hint text,
    at timestamptz
)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF final_status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION 'finish_run: status % is not terminal (COMPLETED, FAILED or CANCELLED)',
            final_status USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgsched.job_runs
    SET status = final_status,
        reason = final_reason,
        error = pgsched.bounded_error(final_error),
        exit_code = final_exit_code,
        retry_hint = final_retry_hint,
        finished_at = at
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease;
    RETURN FOUND;
END;
$$;

-- -- The job role's functions: the database clock, validated input --------------------------

DROP FUNCTION pgsched.heartbeat(bigint, uuid, timestamptz);
DROP FUNCTION pgsched.workload_ended(bigint, uuid, timestamptz);
DROP FUNCTION pgsched.finish_run(bigint, uuid, text, text, text, integer, text, timestamptz);

CREATE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid) RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
    SELECT pgsched.heartbeat_pinned(run_id, lease, pg_catalog.now());
$$;

CREATE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid) RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
    SELECT pgsched.workload_ended_pinned(run_id, lease, pg_catalog.now());
$$;

CREATE FUNCTION pgsched.finish_run(
    run_id bigint,
    lease uuid,
    final_status text,
    final_reason text DEFAULT NULL,
    final_error text DEFAULT NULL,
    final_exit_code integer DEFAULT NULL,
    final_retry_hint text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
BEGIN
    IF final_reason IS NOT NULL AND final_reason !~ '^[A-Za-z][A-Za-z0-9_.]{0,63}$' THEN
        RAISE EXCEPTION 'finish_run: reason % is not a short identifier',
            pg_catalog.quote_literal(pg_catalog.left(final_reason, 80))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a letter, then up to 63 letters, digits, "_" or "."'
                         ' (example: NonZeroExit)';
    END IF;
    IF final_exit_code IS NOT NULL AND final_exit_code NOT BETWEEN 0 AND 255 THEN
        RAISE EXCEPTION 'finish_run: exit code % is out of range 0..255', final_exit_code
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: 1';
    END IF;
    IF final_retry_hint IS NOT NULL AND final_retry_hint NOT IN ('retry', 'never') THEN
        RAISE EXCEPTION 'finish_run: retry hint % is not retry or never',
            pg_catalog.quote_literal(pg_catalog.left(final_retry_hint, 80))
            USING ERRCODE = 'invalid_parameter_value', HINT = 'example: never';
    END IF;
    -- clock_timestamp(), not now(): a claim that waited for this commit must see a
    -- finished_at earlier than its own started_at, or run intervals would seem to overlap.
    RETURN pgsched.finish_run_pinned(run_id, lease, final_status, final_reason, final_error,
                                     final_exit_code, final_retry_hint,
                                     pg_catalog.clock_timestamp());
END;
$$;

-- The previous release's signatures, for its job pods still running during an upgrade:
-- the `at` they pass is ignored.
CREATE FUNCTION pgsched.heartbeat(run_id bigint, lease uuid, ignored_at timestamptz)
RETURNS text
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pgsched.heartbeat(run_id, lease);
$$;

CREATE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid, ignored_at timestamptz)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pgsched.workload_ended(run_id, lease);
$$;

CREATE FUNCTION pgsched.finish_run(
    run_id bigint,
    lease uuid,
    final_status text,
    final_reason text,
    final_error text,
    final_exit_code integer,
    final_retry_hint text,
    ignored_at timestamptz
)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pgsched.finish_run(run_id, lease, final_status, final_reason, final_error,
                              final_exit_code, final_retry_hint);
$$;

ALTER FUNCTION pgsched.lease_state(bigint, uuid) SET lock_timeout = '5s';
ALTER FUNCTION pgsched.listen_for_cancel(bigint, uuid) SET lock_timeout = '5s';

-- -- Repair what a job could have stored before ---------------------------------------------

UPDATE pgsched.job_runs
SET heartbeat_at = least(heartbeat_at, pg_catalog.now()),
    workload_ended_at = least(workload_ended_at, pg_catalog.now())
WHERE status = 'RUNNING'
  AND (heartbeat_at > pg_catalog.now() OR workload_ended_at > pg_catalog.now());

UPDATE pgsched.job_runs
SET finished_at = greatest(least(finished_at, pg_catalog.now()),
                                      coalesce(started_at, scheduled_for))
WHERE finished_at > pg_catalog.now() OR finished_at < coalesce(started_at, scheduled_for);

UPDATE pgsched.job_runs
SET reason = pg_catalog.left(reason, 64),
    error = pgsched.bounded_error(error),
    exit_code = CASE WHEN exit_code BETWEEN 0 AND 255 THEN exit_code END
WHERE pg_catalog.length(reason) > 64 OR pg_catalog.octet_length(error) > 8192
   OR exit_code NOT BETWEEN 0 AND 255;

-- -- Privileges -----------------------------------------------------------------------------

-- Every function in the schema, by name: none is PUBLIC's (0003's REVOKE ON ALL FUNCTIONS
-- covered only the functions of its time, and several were created since without one).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
             WHERE p.pronamespace = 'pgsched'::regnamespace LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END;
$$;

-- The global default (not IN SCHEMA, which cannot revoke it): functions the owner creates
-- from now on are nobody's until granted by name.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Advisory locks: pgsched still keys dispatch, pools, chains and run-now requests on
-- transaction-scoped advisory locks, and any login may take any key (keys in use are
-- visible to all in pg_locks): a job login holding a definition's key would make the
-- tick's claim wait. Where the migrating role may (a superuser: the functions belong to
-- the bootstrap superuser), the advisory lock functions of this database become the
-- schema owner's alone. Managed services (RDS, Cloud SQL, Azure) give no superuser: the
-- statement fails there, the migration goes on, and `pgsched doctor` warns
-- (docs/operations.md, "Advisory locks on managed services").
DO $$
DECLARE
    f regprocedure;
    owner name := (SELECT nspowner::regrole::name FROM pg_catalog.pg_namespace
                   WHERE nspname = 'pgsched');
BEGIN
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        RAISE NOTICE 'not a superuser: the advisory lock functions stay executable by every '
            'login; see docs/operations.md, "Advisory locks on managed services"';
        RETURN;
    END IF;
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
             WHERE p.pronamespace = 'pg_catalog'::regnamespace
               AND p.proname LIKE 'pg\_%advisory\_%' LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', f, owner);
    END LOOP;
END;
$$;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION
            pgsched.heartbeat(bigint, uuid),
            pgsched.workload_ended(bigint, uuid),
            pgsched.finish_run(bigint, uuid, text, text, text, integer, text),
            pgsched.heartbeat(bigint, uuid, timestamptz),
            pgsched.workload_ended(bigint, uuid, timestamptz),
            pgsched.finish_run(bigint, uuid, text, text, text, integer, text, timestamptz)
        TO pgsched_job;
    END IF;
END;
$$;
