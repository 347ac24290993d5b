-- name: try_lead
-- Session-scoped and non-blocking: another replica holding it makes this tick a no-op.
SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(%(lock_name)s, 0)) AS leader;

-- name: stop_leading
SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(%(lock_name)s, 0)) AS released;
