-- Queries of the web UI (pgsched.ui). They only read, and only through the indexes the
-- CLI and the engine already have: definitions by (namespace, name), runs by
-- (definition_id, id DESC), running runs by definition, queued runs by the partial index.

-- name: ui_namespaces
-- Namespaces with a live ScheduledJob: the UI checks access to each of them.
SELECT DISTINCT namespace FROM pgsched.job_definitions
WHERE deleted_at IS NULL
ORDER BY namespace;

-- name: ui_overview
-- One page of live definitions after the keyset (namespace, name), with their health,
-- the last runs (oldest first, for the strip) and queued/running counts.
WITH live AS (
    SELECT d.*,
           CASE WHEN d.rejected_generation IS NOT NULL THEN 'rejected'
                WHEN d.suspended OR d.auto_suspended_at IS NOT NULL THEN 'suspended'
                WHEN d.consecutive_failures > 0 THEN 'failing'
                ELSE 'ready' END AS health
    FROM pgsched.job_definitions AS d
    WHERE d.deleted_at IS NULL
      AND d.namespace = ANY(%(namespaces)s::text[])
      AND (%(name)s::text IS NULL OR strpos(d.name, %(name)s::text) > 0)
      AND (d.namespace, d.name) > (%(after_namespace)s::text, %(after_name)s::text)
), page AS (
    SELECT * FROM live
    WHERE %(health)s::text IS NULL OR health = %(health)s::text
    ORDER BY namespace, name
    LIMIT %(limit)s
), queued AS (
    SELECT q.definition_id, count(*) AS n
    FROM pgsched.job_runs AS q
    WHERE q.status = 'QUEUED' AND q.definition_id IN (SELECT id FROM page)
    GROUP BY q.definition_id
)
SELECT p.*,
       (SELECT sr.reason FROM pgsched.suspend_reasons AS sr
        WHERE sr.definition_id = p.id) AS suspend_reason,  -- suspend_reasons
       coalesce((SELECT n FROM queued WHERE queued.definition_id = p.id), 0) AS queued,
       (SELECT count(*) FROM pgsched.job_runs AS a
        WHERE a.definition_id = p.id AND a.status = 'RUNNING') AS active,
       cs.refused_run, cs.refused_reason, cs.refused_error,  -- engine/starts.py, refusal
       (SELECT coalesce(json_agg(s ORDER BY s.id), '[]'::json)
        FROM (SELECT r.id, r.status, r.reason, r.trigger, r.attempt, r.scheduled_for
              FROM pgsched.job_runs AS r
              WHERE r.definition_id = p.id
              ORDER BY r.id DESC
              LIMIT %(strip)s) AS s) AS strip
FROM page AS p
LEFT JOIN LATERAL pgsched.cannot_start(p.id, p.updated_at, %(cannot_start)s::text[]) AS cs ON true
ORDER BY p.namespace, p.name;

-- name: ui_runs_before
-- A page of a definition's runs, newest first, older than the keyset id.
SELECT * FROM pgsched.job_runs
WHERE definition_id = %(definition_id)s
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: ui_occurrence_runs
-- The scheduled (or backfilled) runs of some occurrences, and every retry of them.
WITH RECURSIVE chain AS (
    SELECT r.* FROM pgsched.job_runs AS r
    WHERE r.definition_id = %(definition_id)s
      AND r.trigger IN ('schedule', 'backfill')
      AND r.scheduled_for = ANY(%(instants)s::timestamptz[])
    UNION ALL
    SELECT r.* FROM pgsched.job_runs AS r JOIN chain AS c ON r.retry_of = c.id
)
SELECT * FROM chain ORDER BY scheduled_for, attempt, id;
