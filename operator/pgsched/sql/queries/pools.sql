-- name: upsert_pool
-- A ConcurrencyPool's limit, keyed by namespace/name; the next claim uses it.
INSERT INTO pgsched.job_pools (namespace, name, concurrency_limit, created_at, updated_at)
VALUES (%(namespace)s, %(name)s, %(limit)s, coalesce(%(now)s, now()), coalesce(%(now)s, now()))
ON CONFLICT (namespace, name) DO UPDATE
SET concurrency_limit = EXCLUDED.concurrency_limit, updated_at = EXCLUDED.updated_at
RETURNING namespace, name, concurrency_limit;

-- name: delete_pool
-- The pool is gone: the jobs that still name it have no room, their runs wait.
DELETE FROM pgsched.job_pools WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: pool_limit
SELECT concurrency_limit FROM pgsched.job_pools
WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: pool_stats
-- Every pool that exists or that a live job names: its limit (NULL: it does not exist),
-- its RUNNING runs, its due QUEUED runs and how many live jobs name it.
WITH named AS (
    SELECT p.namespace, p.name FROM pgsched.job_pools AS p
    UNION
    SELECT d.namespace, d.spec ->> 'pool' FROM pgsched.job_definitions AS d
    WHERE d.pool IS NOT NULL AND d.deleted_at IS NULL
)
SELECT n.namespace, n.name, p.concurrency_limit AS "limit",
       coalesce(c.running, 0) AS running, coalesce(c.queued, 0) AS queued,
       coalesce(c.jobs, 0) AS jobs
FROM named AS n
LEFT JOIN pgsched.job_pools AS p ON p.namespace = n.namespace AND p.name = n.name
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status = 'RUNNING') AS running,
           count(*) FILTER (WHERE r.status = 'QUEUED'
                              AND r.scheduled_for <= coalesce(%(now)s, now())) AS queued,
           count(DISTINCT d.id) FILTER (WHERE d.deleted_at IS NULL) AS jobs
    FROM pgsched.job_definitions AS d
    LEFT JOIN pgsched.job_runs AS r
        ON r.definition_id = d.id AND r.status IN ('RUNNING', 'QUEUED')
    WHERE d.pool = n.namespace || '/' || n.name
) AS c ON true
ORDER BY n.namespace, n.name;

-- name: definitions_in_pool
-- The live jobs that name a pool, whose PoolReady condition follows it.
SELECT d.id FROM pgsched.job_definitions AS d
WHERE d.pool = %(namespace)s || '/' || %(name)s AND d.deleted_at IS NULL
ORDER BY d.id;

-- name: request_member_refresh
-- The pool changed (created, or deleted): its members' statuses are to be rendered again
-- after this transaction commits. A request made again replaces the one pending.
INSERT INTO pgsched.pool_member_refreshes (namespace, name, requested)
VALUES (%(namespace)s, %(name)s, nextval('pgsched.pool_member_refreshes_requested_seq'))
ON CONFLICT (namespace, name) DO UPDATE SET requested = EXCLUDED.requested;

-- name: member_refresh_requested
SELECT requested FROM pgsched.pool_member_refreshes
WHERE namespace = %(namespace)s AND name = %(name)s;

-- name: forget_member_refresh
-- Every member's status was written: forget the request, unless the pool changed again
-- meanwhile (a newer request, whose refresh is still to come).
DELETE FROM pgsched.pool_member_refreshes
WHERE namespace = %(namespace)s AND name = %(name)s AND requested = %(requested)s;
