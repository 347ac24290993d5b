-- Queries of the Run API (k8s/runs_api): runs as Kubernetes objects, newest first.

-- name: runs_api_page
-- One page of runs, newest first, of the ScheduledJobs (live or deleted) in these
-- namespaces (NULL: every namespace), optionally of one ScheduledJob name and in these
-- statuses, with ids below the continue token's. First the page's ids: one walk per
-- ScheduledJob down job_runs_history (definition_id, id DESC), or per (ScheduledJob,
-- status) down job_runs_by_status with the range that makes the planner take it
-- (run_history in cli.sql says why), each stopping at the page size and reading the
-- index alone (no row is fetched to be thrown away), merged and cut. Then only the
-- page's rows, with the values each run was queued with (run_parameters) and who asked
-- for it (run_requesters). A page costs
-- O(ScheduledJobs x page) index entries and O(page) rows, never the size of the history
-- (bench/README.md, runs_api_pages).
WITH d AS (
    SELECT d.id, d.namespace, d.name, d.deleted_at
    FROM pgsched.job_definitions AS d
    WHERE (%(namespaces)s::text[] IS NULL OR d.namespace = ANY(%(namespaces)s::text[]))
      AND (%(scheduled_job)s::text IS NULL OR d.name = %(scheduled_job)s::text)
), page AS (
    SELECT h.id
    FROM d
    CROSS JOIN LATERAL (
        SELECT j.id FROM pgsched.job_runs AS j
        WHERE j.definition_id = d.id AND j.id < %(before)s
        ORDER BY j.id DESC
        LIMIT %(limit)s
    ) AS h
    WHERE %(statuses)s::text[] IS NULL
    UNION ALL
    SELECT h.id
    FROM d
    CROSS JOIN (SELECT DISTINCT unnest(%(statuses)s::text[])) AS s(status)
    CROSS JOIN LATERAL (
        SELECT j.id FROM pgsched.job_runs AS j
        WHERE j.definition_id = d.id AND j.status = s.status
          AND j.status >= s.status AND j.status <= s.status
          AND j.id < %(before)s
        ORDER BY j.id DESC
        LIMIT %(limit)s
    ) AS h
    ORDER BY id DESC
    LIMIT %(limit)s
)
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, r.*,
    p.parameters, q.requested_by
FROM page
JOIN pgsched.job_runs AS r ON r.id = page.id
JOIN d ON d.id = r.definition_id
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id
LEFT JOIN pgsched.run_requesters AS q ON q.run_id = r.id
ORDER BY r.id DESC;

-- name: runs_api_namespaces
-- The namespaces that have ScheduledJobs, live or deleted: those a list across every
-- namespace asks the user's access to.
SELECT DISTINCT d.namespace FROM pgsched.job_definitions AS d ORDER BY d.namespace;

-- name: runs_api_by_token
-- The run a Run API create queued under this name (its request token), in this namespace.
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, r.*,
    p.parameters, q.requested_by
FROM pgsched.job_definitions AS d
JOIN pgsched.job_runs AS r ON r.definition_id = d.id AND r.request_token = %(token)s
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id
LEFT JOIN pgsched.run_requesters AS q ON q.run_id = r.id
WHERE d.namespace = %(namespace)s
ORDER BY r.id
LIMIT 1;

-- name: runs_api_scheduledjob_names
-- The names of this namespace's ScheduledJobs, live or deleted: the stems of its runs' names.
SELECT DISTINCT d.name FROM pgsched.job_definitions AS d WHERE d.namespace = %(namespace)s;

-- name: lock_run_change_sequencer
-- One sequencer at a time (migration 0040 says why); held to the end of its transaction.
SELECT pg_catalog.pg_try_advisory_xact_lock(
    pg_catalog.hashtextextended('pgsched:run-change-sequencer', 0)) AS locked;

-- name: sequence_run_changes
-- Give the committed changes without a place the next places, oldest first. Run after
-- lock_run_change_sequencer in the same transaction: this statement's snapshot is taken
-- after the lock, so it sees every change the previous sequencer did not.
UPDATE pgsched.run_changes AS c
SET seq = pg_catalog.nextval('pgsched.run_change_seq')
FROM (
    SELECT u.id FROM pgsched.run_changes AS u
    WHERE u.seq IS NULL
    ORDER BY u.id
    LIMIT %(limit)s
) AS n
WHERE c.id = n.id;

-- name: prune_run_changes
-- Forget changes older than the retention (and those never sequenced, where no Run API
-- runs), remembering the highest seq forgotten: a watch from before it is 410 Gone.
WITH gone AS (
    DELETE FROM pgsched.run_changes AS c
    WHERE c.at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_seconds)s)
    RETURNING c.seq
)
UPDATE pgsched.run_change_horizon AS h
SET pruned_through = greatest(h.pruned_through, (SELECT max(g.seq) FROM gone AS g))
WHERE EXISTS (SELECT FROM gone AS g WHERE g.seq IS NOT NULL)
RETURNING h.pruned_through;

-- name: runs_api_resource_version
-- The watch order's current end (a list's resourceVersion), and how far back a watch may
-- resume from.
SELECT coalesce((SELECT max(c.seq) FROM pgsched.run_changes AS c), h.pruned_through) AS current,
       h.pruned_through
FROM pgsched.run_change_horizon AS h;

-- name: runs_api_changes
-- The changes after a resourceVersion of runs of these namespaces (NULL: every namespace)
-- and optionally one ScheduledJob, in watch order: only recent rows are read (seq is
-- unique, hence indexed, and a watch asks from where it stopped).
SELECT c.seq, c.run_id, c.status, c.reason, c.created, c.previous_status
FROM pgsched.run_changes AS c
JOIN pgsched.job_definitions AS d ON d.id = c.definition_id
WHERE c.seq > %(after)s
  AND (%(namespaces)s::text[] IS NULL OR d.namespace = ANY(%(namespaces)s::text[]))
  AND (%(scheduled_job)s::text IS NULL OR d.name = %(scheduled_job)s::text)
ORDER BY c.seq
LIMIT %(limit)s;

-- name: runs_api_by_ids
-- These runs as the Run API shows them.
SELECT d.namespace, d.name AS scheduled_job, d.deleted_at AS scheduled_job_deleted_at, r.*,
    p.parameters, q.requested_by
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
LEFT JOIN pgsched.run_parameters AS p ON p.run_id = r.id
LEFT JOIN pgsched.run_requesters AS q ON q.run_id = r.id
WHERE r.id = ANY(%(ids)s::bigint[]);
