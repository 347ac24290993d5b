-- Outages: verdicts that wait for the API, and run ids that survive a failover.
--
-- 1. Outcome-aware reaping (I8). A container run whose heartbeats stopped is not failed
--    HeartbeatLost on the spot: its outcome may be sitting, unread, in its Job's status
--    (the API server was down when the Job finished). The reaper marks it
--    outcome_pending_at instead and the operator's Kubernetes layer settles it from the
--    Job (see pgsched/k8s/verdicts.py). The heartbeat sidecar, which kubelet sends SIGTERM
--    once the main containers ended, stamps workload_ended_at through the narrow
--    pgsched.workload_ended(), so "ended, outcome not read yet" and "vanished" differ.
ALTER TABLE pgsched.job_runs
    ADD COLUMN workload_ended_at  timestamptz,
    ADD COLUMN outcome_pending_at timestamptz;

-- The verdict loop scans pending runs every publisher round: few rows, a tiny index.
CREATE INDEX job_runs_outcome_pending ON pgsched.job_runs (id)
    WHERE status = 'RUNNING' AND outcome_pending_at IS NOT NULL;

CREATE FUNCTION pgsched.workload_ended(run_id bigint, lease uuid, at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgsched.job_runs
    SET workload_ended_at = coalesce(workload_ended_at, at, now())
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease;
    RETURN FOUND;
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.workload_ended(bigint, uuid, timestamptz) FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT EXECUTE ON FUNCTION pgsched.workload_ended(bigint, uuid, timestamptz)
        TO pgsched_job;
    END IF;
END;
$$;

-- 2. Run ids are never reused after an asynchronous failover. The id sequence lives in
--    WAL like everything else: a standby promoted before it received the last ids hands
--    them out again, so one id would name two runs (in logs, Job names, metrics). Each
--    WAL timeline therefore gets its own block of 2^40 ids: the block number is the
--    current timeline minus the timeline this migration ran on, so an installation that
--    never failed over keeps its small ids, and a promoted standby (a new timeline) can
--    never produce an id of the timeline it left. 2^40 ids per timeline and 2^23
--    timelines fit a bigint; Job names (<name>-<id>) stay within 63 characters because
--    job_name shortens the ScheduledJob part.
CREATE TABLE pgsched.run_id_base (
    only_row     boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    timeline_id  bigint  NOT NULL
);

CREATE FUNCTION pgsched.current_timeline() RETURNS bigint
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The first 8 hex digits of a WAL file name are its timeline (readable without the
    -- privileges pg_control_checkpoint() needs, and current right after a promotion).
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
$$;

INSERT INTO pgsched.run_id_base (timeline_id) VALUES (pgsched.current_timeline());

CREATE FUNCTION pgsched.place_run_id() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.id := NEW.id + ((pgsched.current_timeline()
                         - (SELECT timeline_id FROM pgsched.run_id_base)) << 40);
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_runs_place_id
    BEFORE INSERT ON pgsched.job_runs
    FOR EACH ROW EXECUTE FUNCTION pgsched.place_run_id();
