-- Trigger: a definition's row changed in a way dispatch reads, so its version moves on.

CREATE OR REPLACE FUNCTION pgsched.bump_definition_version() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    probe pgsched.job_definitions;
BEGIN
    probe := NEW;
    probe.next_run_at := OLD.next_run_at;
    probe.last_scheduled_for := OLD.last_scheduled_for;
    probe.pool := OLD.pool;  -- generated after BEFORE triggers; follows spec and namespace
    probe.version := OLD.version;
    IF probe IS DISTINCT FROM OLD THEN
        NEW.version := OLD.version + 1;
    ELSE
        NEW.version := OLD.version;
    END IF;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.bump_definition_version() FROM PUBLIC;
