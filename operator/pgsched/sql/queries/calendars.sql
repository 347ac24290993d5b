-- name: upsert_calendar
-- A Calendar's resolved form, keyed by namespace/name; the next tick and status use it.
-- Returns nothing when the stored form is already this one (no version change).
INSERT INTO pgsched.calendars AS c (namespace, name, resolved, created_at, updated_at)
VALUES (%(namespace)s, %(name)s, %(resolved)s, coalesce(%(now)s, now()), coalesce(%(now)s, now()))
ON CONFLICT (namespace, name) DO UPDATE
SET resolved = EXCLUDED.resolved, version = c.version + 1, updated_at = EXCLUDED.updated_at
WHERE c.resolved IS DISTINCT FROM EXCLUDED.resolved
RETURNING version;

-- name: delete_calendar
DELETE FROM pgsched.calendars WHERE namespace = %(namespace)s AND name = %(name)s
RETURNING version;

-- name: calendars_by_names
-- The stored calendars of one namespace among %(names)s (those that exist), with a digest
-- of each resolved form: engine/calendars.py keeps each one's expansions by it.
SELECT name, resolved, md5(resolved::text) AS digest FROM pgsched.calendars
WHERE namespace = %(namespace)s AND name = ANY(%(names)s::text[]);

-- name: calendar_members
-- The live jobs that exclude a calendar, whose nextRuns and CalendarsReady follow it.
SELECT d.id FROM pgsched.job_definitions AS d
WHERE d.namespace = %(namespace)s
  AND d.deleted_at IS NULL
  AND d.spec ? 'calendars'
  AND d.spec -> 'calendars' -> 'exclude' ? %(name)s
ORDER BY d.id;
