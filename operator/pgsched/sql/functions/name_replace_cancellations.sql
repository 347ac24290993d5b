-- Trigger: a run cancelled because a newer one replaced it says which.

CREATE OR REPLACE FUNCTION pgsched.name_replace_cancellations() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NEW.cancel_requested AND NOT OLD.cancel_requested AND NEW.cancelled_by IS NULL THEN
        NEW.cancelled_by := 'Replace';
    END IF;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.name_replace_cancellations() FROM PUBLIC;
