-- name: try_lead
-- Session-scoped and non-blocking: another replica holding it makes this tick a no-op.
SELECT pg_try_advisory_lock(hashtextextended(%(lock_name)s, 0)) AS leader;

-- name: stop_leading
SELECT pg_advisory_unlock(hashtextextended(%(lock_name)s, 0)) AS released;
