-- The reaper: one set-based UPDATE per orphan signature, never a per-row loop.
-- Fenced on status = 'RUNNING', so a run that finished meanwhile is left alone.
-- A run awaiting its verdict (outcome_pending_at, see engine/reap.py) is judged from its
-- workload's own record, never by its silence or by the clock alone.
-- A launching run (no workload start recorded, engine/starts.py) that never beat and that
-- the starts service observed within its heartbeat timeout is not silent either: its pod is
-- waiting for a node or for admission (the sidecar has not started), and the starts service
-- ends it with the pod's own reason at its start bound. One no longer observed (the API
-- server is away) is judged as before. One that beat and went quiet is silent whatever its
-- pod last looked like: the sidecar starts before the workload and beats while the workload
-- pulls, so its silence means the pod or its node died, and a dead node's pods keep their
-- last status in the API for as long as the node is away.
-- Silence is counted from pgsched.silent_since: never across a time when no operator
-- replica served the run API, through which pods beat (docs/run-api.md).

-- name: await_verdicts_of_silent_runs
-- A silent run with a launched workload (a Job) may have finished unseen: ask for its verdict.
-- A run that ever beat has one even if its launch record was lost (the database went away
-- between the Job's creation and SET k8s_job_name): the verdict finds it by its name.
UPDATE pgsched.job_runs AS r
SET outcome_pending_at = %(now)s
FROM pgsched.job_definitions AS d
WHERE r.definition_id = d.id
  AND r.status = 'RUNNING'
  AND r.outcome_pending_at IS NULL
  AND (r.k8s_job_name IS NOT NULL OR r.heartbeat_at IS NOT NULL)
  AND ((r.heartbeat_at IS NOT NULL
        AND pgsched.silent_since(r.heartbeat_at, %(now)s, %(api_gap)s)
            < %(now)s - make_interval(secs => d.heartbeat_timeout_seconds))
       OR (r.heartbeat_at IS NULL
           AND pgsched.silent_since(r.started_at, %(now)s, %(api_gap)s)
               < %(now)s - make_interval(secs => d.orphan_timeout_seconds)
           AND NOT pgsched.observed_launching(
               r.id, %(now)s - make_interval(secs => d.heartbeat_timeout_seconds))))
RETURNING r.id;

-- name: clear_resumed_verdicts
-- The worker was only cut off: it beat again after the run was marked pending.
UPDATE pgsched.job_runs AS r
SET outcome_pending_at = NULL
WHERE r.status = 'RUNNING'
  AND r.outcome_pending_at IS NOT NULL
  AND r.heartbeat_at > r.outcome_pending_at
RETURNING r.id;

-- name: reap_stale_heartbeats
UPDATE pgsched.job_runs AS r
SET status = 'FAILED',
    reason = 'HeartbeatLost',
    error = format('no heartbeat since %%s (heartbeat.timeoutSeconds is %%s)',
                   pgsched.iso_utc(r.heartbeat_at), d.heartbeat_timeout_seconds),
    finished_at = %(now)s
FROM pgsched.job_definitions AS d
WHERE r.definition_id = d.id
  AND r.status = 'RUNNING'
  AND r.outcome_pending_at IS NULL
  AND r.heartbeat_at IS NOT NULL
  AND pgsched.silent_since(r.heartbeat_at, %(now)s, %(api_gap)s)
      < %(now)s - make_interval(secs => d.heartbeat_timeout_seconds)
RETURNING r.id;

-- name: reap_never_heartbeated
UPDATE pgsched.job_runs AS r
SET status = 'FAILED',
    reason = 'Orphaned',
    error = format('started at %%s and never sent a heartbeat (heartbeat.orphanTimeoutSeconds is %%s)',
                   pgsched.iso_utc(r.started_at), d.orphan_timeout_seconds),
    finished_at = %(now)s
FROM pgsched.job_definitions AS d
WHERE r.definition_id = d.id
  AND r.status = 'RUNNING'
  AND r.outcome_pending_at IS NULL
  AND r.heartbeat_at IS NULL
  AND pgsched.silent_since(r.started_at, %(now)s, %(api_gap)s)
      < %(now)s - make_interval(secs => d.orphan_timeout_seconds)
  AND NOT pgsched.observed_launching(r.id, %(now)s - make_interval(secs => d.heartbeat_timeout_seconds))
RETURNING r.id;

-- name: reap_ignored_cancellations
UPDATE pgsched.job_runs AS r
SET status = 'CANCELLED',
    reason = 'Cancelled',
    error = format('did not stop within cancelGraceSeconds (%%s) after cancellation was requested at %%s; stopped by the engine',
                   d.cancel_grace_seconds, pgsched.iso_utc(r.cancel_requested_at)),
    finished_at = %(now)s
FROM pgsched.job_definitions AS d
WHERE r.definition_id = d.id
  AND r.status = 'RUNNING'
  AND r.cancel_requested
  AND r.cancel_requested_at < %(now)s - make_interval(secs => d.cancel_grace_seconds)
  -- A run whose workload already ended (its sidecar said so) or that awaits its verdict is
  -- not "ignoring" the cancel: its outcome is its Job's to tell, and the verdict reads it
  -- (CANCELLED only if the Job says so or is gone). Found by a 10-minute chaos run, where
  -- this rule pre-empted a pending verdict.
  AND r.workload_ended_at IS NULL
  AND r.outcome_pending_at IS NULL
RETURNING r.id;

-- name: reap_active_deadline
UPDATE pgsched.job_runs AS r
SET status = 'FAILED',
    reason = 'DeadlineExceeded',
    error = format('still running after activeDeadlineSeconds (%%s)', d.active_deadline_seconds),
    finished_at = %(now)s
FROM pgsched.job_definitions AS d
WHERE r.definition_id = d.id
  AND r.status = 'RUNNING'
  AND d.active_deadline_seconds IS NOT NULL
  AND r.outcome_pending_at IS NULL  -- its Job has the same deadline and says so itself
  AND r.started_at < %(now)s - make_interval(secs => d.active_deadline_seconds)
RETURNING r.id;

-- name: skip_missed_deadlines
UPDATE pgsched.job_runs AS r
SET status = 'SKIPPED',
    reason = 'DeadlineMissed',
    error = format('not started by its starting deadline %%s', pgsched.iso_utc(r.deadline_at)),
    finished_at = %(now)s,
    settled_at = %(now)s
WHERE r.status = 'QUEUED'
  AND r.deadline_at <= %(now)s
RETURNING r.id;

-- name: unlaunched_claims
-- Runs claimed but never launched: RUNNING with neither a recorded workload (Job name) nor
-- a heartbeat, claimed over %(relaunch_after)s ago. The tick that claims a run launches it
-- and records the launch before it ends, so such a run's claimant stopped in between (its
-- replica killed, its session or its leadership lost). Read, not changed: the tick launches
-- them again under the same lease (engine/dispatch.py), which a launcher whose launches are
-- idempotent per run and lease makes safe even if the claimant was only frozen. Runs the
-- signatures above ended in this transaction are not RUNNING any more.
SELECT r.*
FROM pgsched.job_runs AS r
WHERE r.status = 'RUNNING'
  AND r.k8s_job_name IS NULL
  AND r.heartbeat_at IS NULL
  AND r.outcome_pending_at IS NULL
  AND NOT r.cancel_requested
  AND r.started_at < %(now)s - %(relaunch_after)s::interval
ORDER BY r.started_at, r.id
LIMIT %(relaunch_limit)s;
