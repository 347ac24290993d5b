-- Chaining (engine/chain.py): downstream runs for final upstream outcomes, queued in the
-- transaction that settles the upstream run, exactly once: the inserts run under the
-- downstream's chain lock (lock_chains), so insert_chained_runs' NOT EXISTS sees every
-- chained run committed before (no unique key can span job_runs' partitions), and
-- chain_arrivals' primary key for fan-in.

-- name: chain_edges
-- The live downstream definitions a batch of final upstream runs matches: an edge names
-- the upstream run's ScheduledJob (same namespace) and an outcome it matches.
SELECT f.run_id AS upstream_run_id, u.name AS upstream_name, d.id AS downstream_id,
       d.after_mode
FROM unnest(%(run_ids)s::bigint[], %(outcomes)s::text[]) AS f(run_id, outcome)
JOIN pgsched.job_runs AS r ON r.id = f.run_id
JOIN pgsched.job_definitions AS u ON u.id = r.definition_id
JOIN pgsched.job_dependencies AS dep ON dep.upstream_name = u.name
JOIN pgsched.job_definitions AS d
    ON d.id = dep.downstream_id AND d.namespace = u.namespace AND d.deleted_at IS NULL
WHERE dep.on_outcome IN (f.outcome, 'Finished')
ORDER BY d.id, f.run_id;

-- name: lock_chains
SELECT pgsched.lock_chains(%(ids)s::uuid[]);

-- name: insert_chained_runs
-- One run per (downstream, upstream run). A suspended downstream records the chained
-- occurrence as SKIPPED/Suspended, like a scheduled one; startingDeadlineSeconds counts
-- from the moment the run was queued.
INSERT INTO pgsched.job_runs
    (definition_id, status, trigger, scheduled_for, deadline_at, upstream_run_id, reason,
     error, finished_at, settled_at)
SELECT d.id,
       CASE WHEN skip THEN 'SKIPPED' ELSE 'QUEUED' END,
       'upstream', %(now)s,
       CASE WHEN NOT skip AND d.starting_deadline_seconds IS NOT NULL
            THEN %(now)s + make_interval(secs => d.starting_deadline_seconds) END,
       c.upstream_run_id,
       CASE WHEN skip THEN 'Suspended' END,
       CASE WHEN skip THEN 'the definition is suspended: '
                           || coalesce(d.auto_suspend_reason, 'spec.suspend is true') END,
       CASE WHEN skip THEN %(now)s END,
       CASE WHEN skip THEN %(now)s END
FROM unnest(%(downstream_ids)s::uuid[], %(upstream_run_ids)s::bigint[]) WITH ORDINALITY
     AS c(downstream_id, upstream_run_id, ord)
JOIN pgsched.job_definitions AS d ON d.id = c.downstream_id
CROSS JOIN LATERAL (SELECT d.suspended OR d.auto_suspended_at IS NOT NULL AS skip) AS s
WHERE NOT EXISTS (
    SELECT FROM pgsched.job_runs AS x
    WHERE x.definition_id = d.id AND x.upstream_run_id = c.upstream_run_id
      AND x.trigger = 'upstream')
ORDER BY c.ord  -- ids in upstream order, so equal-time chained runs queue in that order
RETURNING id, definition_id, upstream_run_id, status;

-- name: record_arrivals
INSERT INTO pgsched.chain_arrivals (downstream_id, upstream_name, upstream_run_id)
SELECT * FROM unnest(%(downstream_ids)s::uuid[], %(upstream_names)s::text[],
                     %(upstream_run_ids)s::bigint[])
ON CONFLICT (downstream_id, upstream_run_id) DO NOTHING;

-- name: fan_in_ready
-- Fan-in downstreams every upstream of which has an unconsumed arrival; the run that
-- completes the set is the newest of this batch's arrivals (deterministic, so a replay
-- of the same settle would name the same key).
SELECT a.downstream_id, max(a.upstream_run_id) AS upstream_run_id
FROM pgsched.chain_arrivals AS a
WHERE a.downstream_id = ANY(%(downstream_ids)s::uuid[])
  AND a.upstream_run_id = ANY(%(upstream_run_ids)s::bigint[])
  AND a.consumed_by IS NULL
  AND NOT EXISTS (
      SELECT FROM pgsched.job_dependencies AS dep
      WHERE dep.downstream_id = a.downstream_id
        AND NOT EXISTS (
            SELECT FROM pgsched.chain_arrivals AS w
            WHERE w.downstream_id = dep.downstream_id
              AND w.upstream_name = dep.upstream_name
              AND w.consumed_by IS NULL))
GROUP BY a.downstream_id
ORDER BY a.downstream_id;

-- name: consume_arrivals
UPDATE pgsched.chain_arrivals AS a
SET consumed_by = c.run_id
FROM unnest(%(downstream_ids)s::uuid[], %(run_ids)s::bigint[]) AS c(downstream_id, run_id)
WHERE a.downstream_id = c.downstream_id AND a.consumed_by IS NULL;

-- name: lock_namespace_chains
-- Applies that change edges in one namespace serialize here, so two concurrent applies
-- cannot each miss the other's half of a cycle.
SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('chain-namespace:' || %(namespace)s, 0));

-- name: namespace_edges
SELECT d.name AS downstream, dep.upstream_name AS upstream
FROM pgsched.job_dependencies AS dep
JOIN pgsched.job_definitions AS d ON d.id = dep.downstream_id
WHERE d.namespace = %(namespace)s AND d.deleted_at IS NULL AND d.id <> %(id)s;

-- name: delete_dependencies
DELETE FROM pgsched.job_dependencies WHERE downstream_id = %(id)s;

-- name: insert_dependencies
INSERT INTO pgsched.job_dependencies (downstream_id, upstream_name, on_outcome)
SELECT %(id)s, u.name, u.outcome
FROM unnest(%(names)s::text[], %(outcomes)s::text[]) AS u(name, outcome);

-- name: dependencies_of
-- A downstream's upstreams, and whether a live ScheduledJob of that name exists.
SELECT dep.upstream_name, dep.on_outcome, u.id IS NOT NULL AS found
FROM pgsched.job_dependencies AS dep
JOIN pgsched.job_definitions AS d ON d.id = dep.downstream_id
LEFT JOIN pgsched.job_definitions AS u
    ON u.namespace = d.namespace AND u.name = dep.upstream_name AND u.deleted_at IS NULL
WHERE dep.downstream_id = %(id)s
ORDER BY dep.upstream_name;

-- name: downstreams_of
-- The live jobs naming this one upstream. Driven from job_dependencies (a few rows per name)
-- into job_definitions by primary key, whatever the statistics say: joined the planner's
-- way, it walked every definition of the namespace while the statistics lagged a fleet's
-- creation (3 ms a call at 3,000, and every ScheduledJob synced calls it: quadratic). The
-- OFFSET 0 keeps the lookup a subquery of its own, run per dependency.
SELECT d.id, d.name, dep.on_outcome
FROM pgsched.job_dependencies AS dep
CROSS JOIN LATERAL (
    SELECT id, name, namespace, deleted_at FROM pgsched.job_definitions
    WHERE id = dep.downstream_id
    OFFSET 0
) AS d
WHERE dep.upstream_name = %(name)s AND d.namespace = %(namespace)s AND d.deleted_at IS NULL
ORDER BY d.name;

-- name: triggered_runs
-- Runs queued by these upstream runs (trigger upstream), for the chain both ways.
SELECT r.upstream_run_id, r.id, d.name, r.status
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.upstream_run_id = ANY(%(ids)s::bigint[]) AND r.trigger = 'upstream'
ORDER BY r.upstream_run_id, r.id;

-- name: upstream_definitions_of
-- The upstream definitions of chained runs (whose status lists the runs they triggered).
SELECT DISTINCT u.definition_id AS id
FROM pgsched.job_runs AS r
JOIN pgsched.job_runs AS u ON u.id = r.upstream_run_id
WHERE r.id = ANY(%(ids)s::bigint[]);

-- name: upstream_runs
-- The upstream runs whose final outcomes queued a chained run: the one it names
-- (upstream_run_id) and, for fan-in (afterMode All), every arrival it consumed.
SELECT u.id AS run_id, d.namespace || '/' || d.name AS name, u.status
FROM pgsched.job_runs AS u
JOIN pgsched.job_definitions AS d ON d.id = u.definition_id
WHERE u.id IN (
    SELECT r.upstream_run_id FROM pgsched.job_runs AS r WHERE r.id = %(id)s
    UNION
    SELECT a.upstream_run_id FROM pgsched.chain_arrivals AS a WHERE a.consumed_by = %(id)s)
ORDER BY u.id;

-- name: upstream_run_ids
-- upstream_runs for many runs at once (pgsched runs): each chained run's upstream runs.
SELECT r.id AS run_id, r.upstream_run_id
FROM pgsched.job_runs AS r
WHERE r.id = ANY(%(ids)s::bigint[]) AND r.upstream_run_id IS NOT NULL
UNION
SELECT a.consumed_by, a.upstream_run_id
FROM pgsched.chain_arrivals AS a
WHERE a.consumed_by = ANY(%(ids)s::bigint[])
ORDER BY 1, 2;
