-- Trigger: a new run's id is placed in the current timeline's block of ids.

CREATE OR REPLACE FUNCTION pgsched.place_run_id() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    NEW.id := NEW.id + ((pgsched.current_timeline()
                         - (SELECT timeline_id FROM pgsched.run_id_base)) << 40);
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.place_run_id() FROM PUBLIC;
