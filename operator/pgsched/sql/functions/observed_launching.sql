-- The reaper's question (sql/queries/reap.sql): is this run launching, and was it observed
-- since `since`? Then it is not silent, whatever its heartbeat says.

CREATE OR REPLACE FUNCTION pgsched.observed_launching(run_id bigint, since timestamp with time zone) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT EXISTS (
        SELECT FROM pgsched.run_starts AS s
        WHERE s.run_id = observed_launching.run_id
          AND s.workload_started_at IS NULL
          AND s.observed_at > observed_launching.since)
$$;

REVOKE ALL ON FUNCTION pgsched.observed_launching(run_id bigint, since timestamp with time zone) FROM PUBLIC;
