-- name: try_lead
-- Take the leader row for this session unless another live session holds it: held rows
-- expire (a frozen leader), and a holder whose backend is gone (crashed, killed, on
-- another server after a failover) holds nothing. Never waits longer than another
-- replica's own try. Only roles with privileges on pgsched.leader_locks can take it (0021).
INSERT INTO pgsched.leader_locks AS l (name, holder_pid, holder_started, held_until)
SELECT %(lock_name)s, a.pid, a.backend_start,
       pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %(hold_seconds)s)
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
RETURNING true AS leader;

-- name: stop_leading
-- pgsched: stop leading (doctor's tick_sessions recognizes a replica that led by this line)
UPDATE pgsched.leader_locks
SET holder_pid = NULL, holder_started = NULL, held_until = NULL
WHERE name = %(lock_name)s AND holder_pid = pg_catalog.pg_backend_pid()
RETURNING true AS released;
