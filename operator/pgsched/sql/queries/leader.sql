-- name: try_lead
-- Never blocks: another live replica holding the row makes this tick a no-op
-- (sql/functions/try_lead.sql).
SELECT coalesce(pgsched.try_lead(%(lock_name)s, %(hold_seconds)s), false) AS leader;

-- name: stop_leading
-- pgsched: stop leading (doctor's tick_sessions recognizes a replica that led by this line)
UPDATE pgsched.leader_locks
SET holder_pid = NULL, holder_started = NULL, held_until = NULL
WHERE name = %(lock_name)s AND holder_pid = pg_catalog.pg_backend_pid()
RETURNING true AS released;

-- name: listen_for_dispatch
-- Every tick session: a run's end whose job has a run waiting wakes the tick
-- (pgsched.wake_dispatchers, pgsched.listen_for_dispatch).
SELECT pgsched.listen_for_dispatch();
