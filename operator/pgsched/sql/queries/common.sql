-- name: database_now
-- The database clock is the authority in production; tests pin "now" instead.
SELECT coalesce(%(now)s::timestamptz, now()) AS now;
