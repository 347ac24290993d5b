-- The launcher found a run's Job carrying `adopted`, a genuine earlier lease of this run:
-- the run takes that lease instead of the one it was `claimed` with, fenced on that one, so
-- the Job is kept and its pod's heartbeats count. The owner's alone.

CREATE OR REPLACE FUNCTION pgsched.adopt_lease(run_id bigint, claimed uuid, adopted uuid) RETURNS boolean
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH moved AS (
        UPDATE pgsched.job_runs AS r
        SET lease_token = adopted
        WHERE r.id = run_id AND r.status = 'RUNNING' AND r.lease_token = claimed
          AND adopted <> claimed AND pgsched.lease_is_genuine(run_id, adopted)
        RETURNING r.id
    )
    SELECT EXISTS (SELECT FROM moved);
$$;

REVOKE ALL ON FUNCTION pgsched.adopt_lease(run_id bigint, claimed uuid, adopted uuid) FROM PUBLIC;
