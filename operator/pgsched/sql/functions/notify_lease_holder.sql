-- Trigger: a run asked to stop notifies its lease's channel, so its pod hears at once.

CREATE OR REPLACE FUNCTION pgsched.notify_lease_holder() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify(pgsched.lease_channel(NEW.lease_token), '');
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.notify_lease_holder() FROM PUBLIC;
