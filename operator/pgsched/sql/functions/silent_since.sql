-- When a run that last beat at `beat` became silent, as the reaper counts it at `now`:
-- not before the run API was last available again (a run cannot beat while no replica
-- serves it), and not at all (`now`) while no replica has stamped its presence within
-- `gap` (the API is away now). With no presence row (no run API ever served), `beat`.

CREATE OR REPLACE FUNCTION pgsched.silent_since(beat timestamp with time zone, now timestamp with time zone, gap interval) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE
               WHEN p.only_row IS NULL THEN beat
               WHEN p.seen_at < now - gap THEN now
               ELSE greatest(beat, p.available_since)
           END
    FROM (SELECT true) AS one
    LEFT JOIN pgsched.run_api_presence AS p ON true;
$$;

REVOKE ALL ON FUNCTION pgsched.silent_since(beat timestamp with time zone, now timestamp with time zone, gap interval) FROM PUBLIC;
