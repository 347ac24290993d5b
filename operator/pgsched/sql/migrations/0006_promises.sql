-- Who cancelled a run, a bounded Queue, and cancellation delivered to the pod at once.
--
-- 1. job_runs.cancelled_by: who asked a run to stop (see engine/runs.py for the words:
--    Replace, Annotation, CLI, Deletion). The engine's cancel statements name it. The
--    claim functions of 0004/0005 set cancel_requested for concurrencyPolicy Replace
--    without naming anyone; rather than copying those functions here, a trigger fills in
--    "Replace" when a cancel arrives unnamed — those are the only unnamed writers, and it
--    keeps the previous release's claim (rolling upgrades) recording it too.
-- 1b. job_runs.retry_decision: what settling decided for a terminal run and why ("retried
--    as run 57 in 20s: NonZeroExit is on retryOn", "not retried: attempts used up ..."),
--    shown by `pgsched describe` and the RunRetrying/RunNotRetried Events.
-- 2. job_definitions.max_queued_runs: spec.maxQueuedRuns, the bound on QUEUED runs of a
--    definition; an occurrence due while the queue is full is SKIPPED/QueueFull.
-- 3. A NOTIFY when a running run is asked to stop or stops running, on a channel derived
--    from its lease token, so the pod holding that lease (and no one else: the channel
--    name cannot be guessed without the token, and the payload is empty) wakes at once
--    instead of at its next heartbeat. The job role subscribes through
--    pgsched.listen_for_cancel, which checks the lease first.

ALTER TABLE pgsched.job_runs ADD COLUMN cancelled_by text;
ALTER TABLE pgsched.job_runs ADD COLUMN retry_decision text;
ALTER TABLE pgsched.job_definitions
    ADD COLUMN max_queued_runs integer CHECK (max_queued_runs > 0);

CREATE FUNCTION pgsched.name_replace_cancellations() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.cancel_requested AND NOT OLD.cancel_requested AND NEW.cancelled_by IS NULL THEN
        NEW.cancelled_by := 'Replace';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_runs_cancel_named
    BEFORE UPDATE OF cancel_requested ON pgsched.job_runs
    FOR EACH ROW EXECUTE FUNCTION pgsched.name_replace_cancellations();

-- The channel of a lease: 14 + 40 characters, within the 63 an identifier may have.
CREATE FUNCTION pgsched.lease_channel(lease uuid) RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'pgsched_lease_' || left(encode(sha256(convert_to('channel:' || lease::text, 'UTF8')), 'hex'), 40);
$$;

CREATE FUNCTION pgsched.notify_lease_holder() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify(pgsched.lease_channel(NEW.lease_token), '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_runs_notify_lease_holder
    AFTER UPDATE ON pgsched.job_runs
    FOR EACH ROW
    WHEN (OLD.status = 'RUNNING' AND OLD.lease_token IS NOT NULL AND (
        (NEW.cancel_requested AND NOT OLD.cancel_requested) OR NEW.status <> 'RUNNING'
        OR NEW.lease_token IS DISTINCT FROM OLD.lease_token))
    EXECUTE FUNCTION pgsched.notify_lease_holder();

-- Subscribe this session to its run's channel, if the caller holds the run's lease;
-- returns the lease state (so a cancel that came before the subscription is not missed).
-- The LISTEN takes effect when the caller's transaction commits (at once in autocommit).
CREATE FUNCTION pgsched.listen_for_cancel(run_id bigint, lease uuid) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state text := pgsched.lease_state(run_id, lease);
BEGIN
    IF state <> 'lost' THEN
        EXECUTE format('LISTEN %I', pgsched.lease_channel(lease));
    END IF;
    RETURN state;
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.listen_for_cancel(bigint, uuid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgsched.lease_channel(uuid) FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.listen_for_cancel(bigint, uuid) TO pgsched_job;
    END IF;
END;
$$;
