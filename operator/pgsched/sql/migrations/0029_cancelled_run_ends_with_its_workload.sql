-- A run whose cancellation was requested ends CANCELLED the moment its workload ends
-- (issue 26, "Replace within a second").
--
-- The heartbeat sidecar notes the workload's end on SIGTERM (`workload_ended`, 0021). The
-- run's outcome was then left to the operator's Job watch: the Job controller marking the
-- Job finished, the watch event, the record — 1.5 s and 2.8 s more on the real node, while
-- `concurrencyPolicy: Replace` kept the next run queued behind the old one. For a run asked
-- to stop before its workload ended that outcome is already decided: CANCELLED however the
-- pod exited (pgsched/k8s/outcomes.py, `cancel_stopped`). So the note records it at once,
-- fenced like every job-side write; the Job watch then finds the run ended and changes
-- nothing. A run not asked to stop (or asked only after its workload ended) still waits
-- for its Job's verdict, as before.
--
-- Only the owner-only `*_pinned` variant changes; the job role's `workload_ended(run,
-- lease)` calls it, so pods of the previous release get the new behaviour too.

CREATE OR REPLACE FUNCTION pgsched.workload_ended_pinned(run_id bigint, lease uuid, at timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    stopped boolean;
BEGIN
    UPDATE pgsched.job_runs
    SET workload_ended_at = coalesce(workload_ended_at, at)
    WHERE id = run_id AND status = 'RUNNING' AND lease_token = lease
    RETURNING cancel_requested
              AND (cancel_requested_at IS NULL OR cancel_requested_at < workload_ended_at)
    INTO stopped;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF stopped THEN
        PERFORM pgsched.finish_run_pinned(
            run_id, lease, 'CANCELLED', 'Cancelled',
            'stopped after cancellation was requested (its workload ended)', NULL, NULL, at
        );
    END IF;
    RETURN true;
END;
$$;
