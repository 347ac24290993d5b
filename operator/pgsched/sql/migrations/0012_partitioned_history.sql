-- History that grows at flat cost: job_runs becomes a table partitioned by month of
-- scheduled_for, so expired history is dropped a whole partition at a time (no DELETE,
-- no vacuum debt) and the live queue's partial indexes stay small in every partition.
--
-- 1. The partition key is scheduled_for: every run has one from its insert on, it never
--    changes (a run never moves between partitions), and it is what the idempotency key
--    of materialization already contains. Keys, as a partitioned table allows them:
--    - occurrence (definition, scheduled_for, trigger): unchanged, still a unique index;
--      it contains the partition key.
--    - run id: the primary key is (id, scheduled_for); ids stay unique because the only
--      way to get one is the identity sequence (GENERATED ALWAYS, placed per timeline by
--      place_run_id, migration 0007), which this migration carries over.
--    - one retry per failed attempt, one chained run per (downstream, upstream run), one
--      manual run per (definition, request token): a unique index would have to contain
--      scheduled_for, which differs between two such inserts. They are kept by the lock
--      each insert already holds (the failed run's row lock in settle, the chain's
--      advisory lock, a request lock for run-now) plus a NOT EXISTS read in a statement
--      after it (queries settle.sql insert_retry, chain.sql insert_chained_runs,
--      runs.sql enqueue_manual). Plain indexes keep those reads cheap.
--    - foreign keys to a run id (retry_of, upstream_run_id, chain_arrivals) cannot name
--      (id) alone any more and are dropped: a row may name a run whose partition
--      retention dropped; readers already treat such a run as gone (LEFT JOIN, scalar
--      subqueries). Retention deletes the chain arrivals its dropped runs consumed.
-- 2. Partitions are job_runs_yYYYYmMM, one per UTC month, and job_runs_default for any
--    scheduled_for outside them (a backfill before the oldest month, a run queued beyond
--    the months created ahead). The operator's history service (engine/history.py) creates
--    months ahead (moving any rows of that month out of the default partition) and drops
--    expired ones; this migration creates the months the existing rows need.
-- 3. The move: under an ACCESS EXCLUSIVE lock (claims, heartbeats and finishes wait, none
--    fail), every row is copied with its id and lease, the counts are checked, and the
--    old table is dropped. A release racing this one keeps working on the new table: its
--    statements re-resolve the name after the lock, the row type is the same.
LOCK TABLE pgsched.job_runs IN ACCESS EXCLUSIVE MODE;

-- Functions whose signature names the row type (claim_for_dispatch returns one): their
-- source, to create them again on the new table's row type, unchanged.
CREATE TEMPORARY TABLE history_functions ON COMMIT DROP AS
SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS source
FROM pg_proc AS p
JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
WHERE d.refclassid = 'pg_type'::regclass AND d.refobjid = 'pgsched.job_runs'::regtype;

DO $$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT signature FROM history_functions LOOP
        EXECUTE format('DROP FUNCTION %s', f.signature);
    END LOOP;
END;
$$;

ALTER TABLE pgsched.chain_arrivals
    DROP CONSTRAINT chain_arrivals_consumed_by_fkey,
    DROP CONSTRAINT chain_arrivals_upstream_run_id_fkey;
ALTER TABLE pgsched.job_runs
    DROP CONSTRAINT job_runs_retry_of_fkey,
    DROP CONSTRAINT job_runs_upstream_run_id_fkey,
    DROP CONSTRAINT job_runs_pkey;
DROP INDEX pgsched.job_runs_occurrence_key, pgsched.job_runs_retry_key,
    pgsched.job_runs_request_key, pgsched.job_runs_queued, pgsched.job_runs_running,
    pgsched.job_runs_unsettled, pgsched.job_runs_history, pgsched.job_runs_outcome_pending,
    pgsched.job_runs_upstream_key, pgsched.job_runs_downstream;
ALTER TABLE pgsched.job_runs RENAME TO job_runs_unpartitioned;
ALTER SEQUENCE pgsched.job_runs_id_seq RENAME TO job_runs_unpartitioned_id_seq;

CREATE TABLE pgsched.job_runs (
    LIKE pgsched.job_runs_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY
) PARTITION BY RANGE (scheduled_for);
ALTER TABLE pgsched.job_runs
    ADD FOREIGN KEY (definition_id) REFERENCES pgsched.job_definitions (id);

-- One month's partition, [month, month + 1 month) in UTC. Rows of that month waiting in
-- the default partition move into it (same ids, same leases), under a lock that makes
-- readers wait for the few milliseconds it takes. Returns how many rows moved.
CREATE FUNCTION pgsched.create_run_partition(month timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    low timestamptz := date_trunc('month', month, 'UTC');
    high timestamptz := low + interval '1 month';
    name text := 'job_runs_' || to_char(low AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
    moved bigint := 0;
BEGIN
    -- Autovacuum as migration 0004 tuned the whole table: early, for the live queue.
    EXECUTE format(
        'CREATE TABLE pgsched.%I (LIKE pgsched.job_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
        ' WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,'
        ' autovacuum_analyze_scale_factor = 0.02)', name);
    IF to_regclass('pgsched.job_runs_default') IS NOT NULL THEN
        LOCK TABLE pgsched.job_runs_default IN ACCESS EXCLUSIVE MODE;
        EXECUTE format(
            'WITH gone AS (DELETE FROM pgsched.job_runs_default'
            ' WHERE scheduled_for >= $1 AND scheduled_for < $2 RETURNING *)'
            ' INSERT INTO pgsched.%I SELECT * FROM gone', name) USING low, high;
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    -- The check lets ATTACH skip its scan of the new partition.
    EXECUTE format(
        'ALTER TABLE pgsched.%I ADD CONSTRAINT %I CHECK (scheduled_for >= %L AND scheduled_for < %L)',
        name, name || '_range', low, high);
    EXECUTE format(
        'ALTER TABLE pgsched.job_runs ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
        name, low, high);
    EXECUTE format('ALTER TABLE pgsched.%I DROP CONSTRAINT %I', name, name || '_range');
    RETURN moved;
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.create_run_partition(timestamptz) FROM PUBLIC;

DO $$
DECLARE
    month timestamptz;
BEGIN
    FOR month IN
        SELECT DISTINCT date_trunc('month', scheduled_for, 'UTC')
        FROM pgsched.job_runs_unpartitioned
    LOOP
        PERFORM pgsched.create_run_partition(month);
    END LOOP;
END;
$$;
CREATE TABLE pgsched.job_runs_default PARTITION OF pgsched.job_runs DEFAULT
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
          autovacuum_analyze_scale_factor = 0.02);

-- Every row, with its id, lease and status, before any trigger exists (no outbox events,
-- no new ids) and before the indexes (built once, in bulk).
INSERT INTO pgsched.job_runs OVERRIDING SYSTEM VALUE
SELECT * FROM pgsched.job_runs_unpartitioned;

DO $$
DECLARE
    before bigint := (SELECT count(*) FROM pgsched.job_runs_unpartitioned);
    after bigint := (SELECT count(*) FROM pgsched.job_runs);
    next_id bigint := nextval('pgsched.job_runs_unpartitioned_id_seq');
BEGIN
    IF before <> after THEN
        RAISE EXCEPTION 'job_runs has % rows, its partitioned copy %', before, after;
    END IF;
    EXECUTE format('ALTER TABLE pgsched.job_runs ALTER COLUMN id RESTART WITH %s', next_id);
END;
$$;

ALTER TABLE pgsched.job_runs ADD CONSTRAINT job_runs_pkey PRIMARY KEY (id, scheduled_for);
-- I1: an occurrence is materialized at most once.
CREATE UNIQUE INDEX job_runs_occurrence_key ON pgsched.job_runs (definition_id, scheduled_for, trigger)
    WHERE trigger IN ('schedule', 'backfill');
-- The reads that keep one retry, one chained run, one request each (see 1. above).
CREATE INDEX job_runs_retries ON pgsched.job_runs (retry_of) WHERE retry_of IS NOT NULL;
CREATE INDEX job_runs_requests ON pgsched.job_runs (definition_id, request_token)
    WHERE request_token IS NOT NULL;
CREATE INDEX job_runs_chained ON pgsched.job_runs (definition_id, upstream_run_id)
    WHERE trigger = 'upstream';
-- As before (migrations 0001, 0007, 0011), now one small index per partition.
CREATE INDEX job_runs_queued ON pgsched.job_runs (scheduled_for, id) WHERE status = 'QUEUED';
CREATE INDEX job_runs_running ON pgsched.job_runs (definition_id) WHERE status = 'RUNNING';
CREATE INDEX job_runs_unsettled ON pgsched.job_runs (id)
    WHERE settled_at IS NULL AND status IN ('COMPLETED', 'FAILED', 'CANCELLED');
CREATE INDEX job_runs_history ON pgsched.job_runs (definition_id, id DESC);
CREATE INDEX job_runs_outcome_pending ON pgsched.job_runs (id)
    WHERE status = 'RUNNING' AND outcome_pending_at IS NOT NULL;
CREATE INDEX job_runs_downstream ON pgsched.job_runs (upstream_run_id)
    WHERE upstream_run_id IS NOT NULL;

CREATE TRIGGER job_runs_place_id
    BEFORE INSERT ON pgsched.job_runs
    FOR EACH ROW EXECUTE FUNCTION pgsched.place_run_id();
CREATE TRIGGER job_runs_inserted
    AFTER INSERT ON pgsched.job_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.record_inserted_runs();
CREATE TRIGGER job_runs_status_changed
    AFTER UPDATE ON pgsched.job_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched.record_run_status_changes();
CREATE TRIGGER job_runs_cancel_named
    BEFORE UPDATE OF cancel_requested ON pgsched.job_runs
    FOR EACH ROW EXECUTE FUNCTION pgsched.name_replace_cancellations();
CREATE TRIGGER job_runs_notify_lease_holder
    AFTER UPDATE ON pgsched.job_runs
    FOR EACH ROW
    WHEN (OLD.status = 'RUNNING' AND OLD.lease_token IS NOT NULL AND (
        (NEW.cancel_requested AND NOT OLD.cancel_requested) OR NEW.status <> 'RUNNING'
        OR NEW.lease_token IS DISTINCT FROM OLD.lease_token))
    EXECUTE FUNCTION pgsched.notify_lease_holder();

DROP TABLE pgsched.job_runs_unpartitioned;

DO $$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT signature, source FROM history_functions LOOP
        EXECUTE f.source;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
    END LOOP;
END;
$$;

-- 4. Retention: one expired month, dropped if nothing in it is still live. A partition
--    holding a QUEUED or RUNNING run, or a finished one not settled yet (its retry or
--    chain is still to be decided), is kept and reported; the service tries again later.
--    The drop needs the parent's ACCESS EXCLUSIVE lock (PostgreSQL 15 cannot detach
--    concurrently next to a default partition): it is held for the index-only checks and
--    the unlink, a few milliseconds, and waited for at most lock_wait (then 'busy').
CREATE FUNCTION pgsched.drop_run_partition(partition_name text, lock_wait interval)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    live_check text := format(
        'SELECT EXISTS (SELECT FROM pgsched.%1$I WHERE status = ''QUEUED'')'
        ' OR EXISTS (SELECT FROM pgsched.%1$I WHERE status = ''RUNNING'')'
        ' OR EXISTS (SELECT FROM pgsched.%1$I WHERE settled_at IS NULL'
        '            AND status IN (''COMPLETED'', ''FAILED'', ''CANCELLED''))',
        partition_name);
    live boolean;
BEGIN
    IF to_regclass(format('pgsched.%I', partition_name)) IS NULL THEN
        RETURN 'gone';
    END IF;
    EXECUTE live_check INTO live;
    IF live THEN
        RETURN 'kept';
    END IF;
    -- Arrivals its runs consumed are spent; those waiting stay (they name an upstream
    -- run, not a row). Done before the lock: the join reads the whole partition's ids.
    EXECUTE format(
        'DELETE FROM pgsched.chain_arrivals AS a WHERE a.consumed_by IS NOT NULL'
        ' AND EXISTS (SELECT FROM pgsched.%I AS r WHERE r.id = a.consumed_by)',
        partition_name);
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms', true);
    BEGIN
        LOCK TABLE pgsched.job_runs IN ACCESS EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    EXECUTE live_check INTO live;  -- again, now that nothing can change it
    IF live THEN
        RETURN 'kept';
    END IF;
    EXECUTE format('DROP TABLE pgsched.%I', partition_name);
    RETURN 'dropped';
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.drop_run_partition(text, interval) FROM PUBLIC;
