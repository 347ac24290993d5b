-- Take the leader row for this session unless another live session holds it: held rows
-- expire (a frozen leader), and a holder whose backend is gone holds nothing. The database
-- clock on purpose: a test's pinned "now" must not decide which replica leads.

CREATE OR REPLACE FUNCTION pgsched.try_lead(lock_name text, hold_seconds double precision) RETURNS boolean
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    INSERT INTO pgsched.leader_locks AS l (name, holder_pid, holder_started, held_until)
    SELECT lock_name, a.pid, a.backend_start,
           pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => hold_seconds)
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid = pg_catalog.pg_backend_pid()
    ON CONFLICT (name) DO UPDATE
    SET holder_pid = excluded.holder_pid,
        holder_started = excluded.holder_started,
        held_until = excluded.held_until
    WHERE l.holder_pid IS NULL
       OR l.held_until < pg_catalog.clock_timestamp()
       OR NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS h
                      WHERE h.pid = l.holder_pid AND h.backend_start = l.holder_started
                        AND h.pid <> pg_catalog.pg_backend_pid())
    RETURNING true;
$$;

REVOKE ALL ON FUNCTION pgsched.try_lead(lock_name text, hold_seconds double precision) FROM PUBLIC;
