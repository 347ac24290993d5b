-- Queries of the Run API (k8s/runs_api): runs as Kubernetes objects, newest first.

-- name: runs_api_page
-- One page of runs, newest first, of the ScheduledJobs (live or deleted) in these
-- namespaces (NULL: every namespace), optionally of one ScheduledJob name and in these
-- statuses, with ids below the continue token's. One walk per ScheduledJob down
-- job_runs_history (definition_id, id DESC), or per (ScheduledJob, status) down
-- job_runs_by_status with the range that makes the planner take it (run_history in
-- cli.sql says why), each stopping at the page size, merged and cut: a page costs
-- O(ScheduledJobs x page), never the size of the history. With the values each run was
-- queued with (run_parameters).
WITH d AS (
    SELECT d.id, d.namespace, d.name, d.deleted_at
    FROM pgsched.job_definitions AS d
    WHERE (%(namespaces)s::text[] IS NULL OR d.namespace = ANY(%(namespaces)s::text[]))
      AND (%(scheduled_job)s::text IS NULL OR d.name = %(scheduled_job)s::text)
)
SELECT page.*, p.parameters
FROM (
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, h.*
FROM d
CROSS JOIN LATERAL (
    SELECT j.* FROM pgsched.job_runs AS j
    WHERE j.definition_id = d.id AND j.id < %(before)s
    ORDER BY j.id DESC
    LIMIT %(limit)s
) AS h
WHERE %(statuses)s::text[] IS NULL
UNION ALL
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, h.*
FROM d
CROSS JOIN (SELECT DISTINCT unnest(%(statuses)s::text[])) AS s(status)
CROSS JOIN LATERAL (
    SELECT j.* FROM pgsched.job_runs AS j
    WHERE j.definition_id = d.id AND j.status = s.status
      AND j.status >= s.status AND j.status <= s.status
      AND j.id < %(before)s
    ORDER BY j.id DESC
    LIMIT %(limit)s
) AS h
ORDER BY id DESC
LIMIT %(limit)s
) AS page
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = page.id
ORDER BY page.id DESC;

-- name: runs_api_one
-- One run by id, if it belongs to a ScheduledJob (live or deleted) of this namespace.
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, r.*,
    p.parameters
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id
WHERE r.id = %(id)s AND d.namespace = %(namespace)s;

-- name: runs_api_namespaces
-- The namespaces that have ScheduledJobs, live or deleted: those a list across every
-- namespace asks the user's access to.
SELECT DISTINCT d.namespace FROM pgsched.job_definitions AS d ORDER BY d.namespace;
