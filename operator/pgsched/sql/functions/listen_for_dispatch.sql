-- Subscribe this session (autocommit: at once) to the dispatch wakeups.

CREATE OR REPLACE FUNCTION pgsched.listen_for_dispatch() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    EXECUTE format('LISTEN %I', pgsched.dispatch_channel());
END;
$$;

REVOKE ALL ON FUNCTION pgsched.listen_for_dispatch() FROM PUBLIC;
