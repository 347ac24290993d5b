-- Trigger: a run asked to stop notifies its lease's channel, so a pod of the previous
-- release (which LISTENs itself) hears at once, and the run API's channel with the run id,
-- so the operator answers that run's cancel long polls (docs/run-api.md).

CREATE OR REPLACE FUNCTION pgsched.notify_lease_holder() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify(pgsched.lease_channel(NEW.lease_token), '');
    PERFORM pg_notify('pgsched_run_stopping', NEW.id::text);
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.notify_lease_holder() FROM PUBLIC;
