-- Whether a run's workload has started, and what its pod says while it has not (issue 26,
-- pgsched/engine/starts.py, pgsched/k8s/starts.py).
--
-- A claimed run is RUNNING in job_runs from its claim, but its workload may never start:
-- an image that cannot be pulled, a missing Secret, an unschedulable pod, a Job an
-- admission queue keeps suspended. The heartbeat sidecar starts first and beats either
-- way, so the heartbeat vouches for the pod, not for the workload. The starts service
-- reads the pods of runs without a recorded start and writes here: the workload's start
-- (`workload_started_at`, the pod's own `state.running.startedAt`), or the pod's reason
-- for waiting and when the launching state ends the run (`bound_at`: startTimeoutSeconds
-- after the claim, or after admission; admissionTimeoutSeconds while suspended).
--
-- `observed_at` is when the service last read the pod: a launching run observed within
-- its heartbeat timeout is not silent (the reaper leaves it to the starts service, which
-- ends it with the pod's own reason at `bound_at`); one no longer observed (the API server
-- is away) is judged by the reaper and the verdicts as before.
--
-- A table of its own, not columns of job_runs: adding a column changes the row type of
-- every `SELECT * FROM job_runs` a running replica of the previous release has prepared
-- (see 0017). No foreign key: job_runs is partitioned; rows of runs whose month was dropped
-- are deleted by the history service.

CREATE TABLE pgsched.run_starts (
    run_id bigint PRIMARY KEY,
    workload_started_at timestamptz,
    waiting_reason text,
    waiting_message text,
    awaiting_admission boolean NOT NULL DEFAULT false,
    admitted_at timestamptz,
    bound_at timestamptz,
    observed_at timestamptz NOT NULL
);

-- The reaper's question (sql/queries/reap.sql): is this run launching, and was it observed
-- since `since`? Then it is not silent, whatever its heartbeat says.
CREATE FUNCTION pgsched.observed_launching(run_id bigint, since timestamptz) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT EXISTS (
        SELECT FROM pgsched.run_starts AS s
        WHERE s.run_id = observed_launching.run_id
          AND s.workload_started_at IS NULL
          AND s.observed_at > observed_launching.since)
$$;

REVOKE ALL ON FUNCTION pgsched.observed_launching(bigint, timestamptz) FROM PUBLIC;
