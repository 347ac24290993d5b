-- Why a ScheduledJob cannot start, if it cannot: its Ready condition, `kubectl get sj`'s
-- READY, the UI's health and doctor (engine/starts.py, refusal). Among its newest 20 claimed
-- runs, the newest with a verdict on its launch: either its workload started (recorded, or
-- it has an exit code, or it COMPLETED), or it ended FAILED with one of `reasons` (the same
-- spec in the same namespace fails the same way: Pod Security, an image that cannot be
-- pulled, a config error, the API server refusing the Job). That run, if it is a refusal
-- claimed at or after `since` (the definition's last change: a changed spec deserves a
-- try); nothing otherwise. Twenty runs bound the cost of a status render or a UI page.

CREATE OR REPLACE FUNCTION pgsched.cannot_start(definition_id uuid, since timestamp with time zone, reasons text[]) RETURNS TABLE(refused_run bigint, refused_reason text, refused_error text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH recent AS (
        SELECT r.id, r.status, r.reason, r.error, r.started_at, r.exit_code
        FROM pgsched.job_runs AS r
        WHERE r.definition_id = cannot_start.definition_id
          AND r.started_at IS NOT NULL
        ORDER BY r.id DESC
        LIMIT 20
    ), verdict AS (
        SELECT c.*, (c.status = 'FAILED' AND c.reason = ANY(cannot_start.reasons)) AS refused
        FROM recent AS c
        LEFT JOIN pgsched.run_starts AS s ON s.run_id = c.id
        WHERE (c.status = 'FAILED' AND c.reason = ANY(cannot_start.reasons))
           OR s.workload_started_at IS NOT NULL
           OR c.status = 'COMPLETED'
           OR c.exit_code IS NOT NULL
        ORDER BY c.id DESC
        LIMIT 1
    )
    SELECT v.id, v.reason, v.error FROM verdict AS v
    WHERE v.refused AND v.started_at >= cannot_start.since
$$;

REVOKE ALL ON FUNCTION pgsched.cannot_start(definition_id uuid, since timestamp with time zone, reasons text[]) FROM PUBLIC;
