-- A run's end wakes the dispatchers when a run of its job waits for it.
--
-- concurrencyPolicy Replace (and Queue under maxConcurrentRuns) keeps the next run QUEUED
-- until the running one has ended. The run ends between ticks — when its sidecar notes
-- the workload's end, or the Job watch its outcome — and the next tick, up to a whole
-- interval later (1 s by default), claimed the waiting run: Replace started the new run
-- over a second after its time (issue 26). Now that end notifies a channel every tick
-- session listens on, and the tick runs at once.
--
-- The channel is derived from pgsched.lease_key, which no role but the owner can read:
-- any role may LISTEN or NOTIFY any channel it can name, and a job login that could name
-- this one could make every replica tick without pause. Only the owner's sessions call
-- pgsched.listen_for_dispatch. The payload is empty.

CREATE FUNCTION pgsched.dispatch_channel() RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- 17 + 40 characters, within the 63 an identifier may have.
    SELECT 'pgsched_dispatch_' || left(encode(sha256(convert_to('dispatch:', 'UTF8') || k.key), 'hex'), 40)
    FROM pgsched.lease_key AS k;
$$;
REVOKE ALL ON FUNCTION pgsched.dispatch_channel() FROM PUBLIC;

-- Subscribe this session (autocommit: at once) to the wakeups.
CREATE FUNCTION pgsched.listen_for_dispatch() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('LISTEN %I', pgsched.dispatch_channel());
END;
$$;
REVOKE ALL ON FUNCTION pgsched.listen_for_dispatch() FROM PUBLIC;

-- SECURITY DEFINER: the end may be written by the job role's finish or workload-end
-- functions, and the channel is the owner's to compute.
CREATE FUNCTION pgsched.wake_dispatchers() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pgsched.job_runs AS q
        WHERE q.definition_id = NEW.definition_id AND q.status = 'QUEUED'
    ) THEN
        PERFORM pg_notify(pgsched.dispatch_channel(), '');
    END IF;
    RETURN NULL;
END;
$$;
REVOKE ALL ON FUNCTION pgsched.wake_dispatchers() FROM PUBLIC;

CREATE TRIGGER job_runs_wake_dispatchers
    AFTER UPDATE OF status ON pgsched.job_runs
    FOR EACH ROW
    WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING')
    EXECUTE FUNCTION pgsched.wake_dispatchers();
