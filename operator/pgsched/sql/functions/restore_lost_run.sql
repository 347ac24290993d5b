-- Restore run `run_id`, lost with its row, from the Job `job_name` in `namespace` that
-- holds `lease`. Owner's alone (no grant): the job role must not create runs. Returns
-- what happened:
--   restored      the row is back, RUNNING under `lease`; duplicate_id: the QUEUED run of
--                 the same occurrence or request that was skipped for it, if any;
--   forged        `lease` is not genuine for `run_id` (a Job and Secret a tenant made up);
--   current       `run_id` is of the current timeline's block (not from before a failover);
--   exists        the database has `run_id` (nothing was lost);
--   no_definition the definition is not a live one of `namespace`;
--   duplicate_ran the new primary claimed (or ended) a duplicate already: duplicate_id,
--                 duplicate_status; nothing is restored (that work ran twice, or the
--                 duplicate ended without running and still holds the occurrence).
-- The definition must be in the Job's own namespace: a tenant who may edit its Jobs'
-- annotations can at most misfile a genuine run among its own ScheduledJobs.

CREATE OR REPLACE FUNCTION pgsched.restore_lost_run(run_id bigint, lease uuid, namespace text, job_name text, definition_id uuid, run_trigger text, scheduled_for timestamp with time zone, attempt integer, retry_of bigint, upstream_run_id bigint, request_token text) RETURNS TABLE(outcome text, duplicate_id bigint, duplicate_status text)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    -- Ids of the current timeline's block start after this (migration 0007).
    block_offset bigint := (pgsched.current_timeline()
                            - (SELECT b.timeline_id FROM pgsched.run_id_base AS b)) << 40;
    duplicate pgsched.job_runs;
BEGIN
    IF NOT pgsched.lease_is_genuine(run_id, lease) THEN
        RETURN QUERY SELECT 'forged'::text, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    IF run_id > block_offset THEN
        RETURN QUERY SELECT 'current'::text, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    PERFORM FROM pgsched.job_definitions AS d
    WHERE d.id = restore_lost_run.definition_id AND d.namespace = restore_lost_run.namespace
      AND d.deleted_at IS NULL;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_definition'::text, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM pgsched.job_runs AS r WHERE r.id = run_id) THEN
        RETURN QUERY SELECT 'exists'::text, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    -- First the lock under which the new primary creates its run for the same work, so
    -- that a duplicate being created now is seen here once committed, or sees this run
    -- (no unique key but the occurrence's can span job_runs' partitions): a run-now
    -- request's lock, the failed run's row (settle's insert_retry holds it), the chain
    -- lock (settle's insert_chained_runs). An occurrence's duplicate meets this insert on
    -- job_runs_occurrence_key instead: this call fails, and the pass's next round skips it.
    CASE run_trigger
        WHEN 'manual' THEN
            PERFORM pgsched.lock_request(restore_lost_run.definition_id,
                                         restore_lost_run.request_token);
        WHEN 'retry' THEN
            PERFORM FROM pgsched.job_runs AS f WHERE f.id = restore_lost_run.retry_of
            FOR NO KEY UPDATE OF f;
        WHEN 'upstream' THEN
            PERFORM pgsched.lock_chains(ARRAY[restore_lost_run.definition_id]);
        ELSE
            NULL;
    END CASE;
    -- The new primary's run for the same work: the same occurrence, request, retry or
    -- upstream outcome (each trigger's own key), of the same definition. Its row lock
    -- first, as the claim and reestablish_claim take a run's: a claim of it in flight is
    -- waited for (then seen), and one that starts later skips it (SKIP LOCKED).
    SELECT r.* INTO duplicate
    FROM pgsched.job_runs AS r
    WHERE r.definition_id = restore_lost_run.definition_id AND r.trigger = run_trigger
      AND r.id <> run_id
      AND r.reason IS DISTINCT FROM 'DuplicateOfRestoredRun'
      AND CASE run_trigger
              WHEN 'manual' THEN r.request_token = restore_lost_run.request_token
              WHEN 'retry' THEN r.retry_of = restore_lost_run.retry_of
              WHEN 'upstream' THEN r.upstream_run_id = restore_lost_run.upstream_run_id
              ELSE r.scheduled_for = restore_lost_run.scheduled_for
          END
    ORDER BY r.id
    LIMIT 1
    FOR UPDATE OF r;
    IF FOUND AND duplicate.status <> 'QUEUED' THEN
        RETURN QUERY SELECT 'duplicate_ran'::text, duplicate.id, duplicate.status;
        RETURN;
    END IF;
    IF FOUND THEN
        UPDATE pgsched.job_runs AS r
        SET status = 'SKIPPED', reason = 'DuplicateOfRestoredRun',
            error = format('run %s of the same %s was created and launched before a failover'
                           ' that lost its row; it was restored from its Job %s, so this'
                           ' duplicate never ran', run_id,
                           CASE run_trigger WHEN 'manual' THEN 'run-now request'
                                            WHEN 'retry' THEN 'retry'
                                            WHEN 'upstream' THEN 'upstream outcome'
                                            ELSE 'occurrence' END,
                           job_name),
            finished_at = clock_timestamp(), settled_at = clock_timestamp()
        WHERE r.id = duplicate.id AND r.scheduled_for = duplicate.scheduled_for
          AND r.status = 'QUEUED';
    END IF;
    -- place_run_id() adds the current block's offset to every inserted id: given the id
    -- less that offset, it stores the old id itself.
    INSERT INTO pgsched.job_runs
        (id, definition_id, status, trigger, scheduled_for, attempt, retry_of,
         upstream_run_id, request_token, lease_token, started_at, heartbeat_at, k8s_job_name)
    OVERRIDING SYSTEM VALUE
    VALUES (run_id - block_offset, restore_lost_run.definition_id, 'RUNNING', run_trigger,
            restore_lost_run.scheduled_for, restore_lost_run.attempt, restore_lost_run.retry_of,
            restore_lost_run.upstream_run_id, restore_lost_run.request_token, lease,
            clock_timestamp(), clock_timestamp(), job_name);
    RETURN QUERY SELECT 'restored'::text, duplicate.id, duplicate.status;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.restore_lost_run(run_id bigint, lease uuid, namespace text, job_name text, definition_id uuid, run_trigger text, scheduled_for timestamp with time zone, attempt integer, retry_of bigint, upstream_run_id bigint, request_token text) FROM PUBLIC;
