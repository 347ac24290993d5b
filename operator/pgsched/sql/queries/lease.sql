-- The job side's operations. They go through the SECURITY DEFINER functions so the
-- operator and job pods (with their narrow role) run exactly the same fenced statements.
-- The job role's variants take no time: the database clock stamps it. The *_pinned
-- variants, for a caller that pins "now" (tests, the engine's pinned clock), are the
-- owner's alone (docs/security-database.md).

-- name: heartbeat
SELECT pgsched.heartbeat(%(run_id)s, %(lease_token)s) AS state;

-- name: heartbeat_pinned
SELECT pgsched.heartbeat_pinned(%(run_id)s, %(lease_token)s, %(now)s) AS state;

-- name: lease_state
SELECT pgsched.lease_state(%(run_id)s, %(lease_token)s) AS state;

-- name: finish_run
SELECT pgsched.finish_run(%(run_id)s, %(lease_token)s, %(status)s, %(reason)s, %(error)s,
                          %(exit_code)s, %(retry_hint)s) AS finished;

-- name: finish_run_pinned
SELECT pgsched.finish_run_pinned(%(run_id)s, %(lease_token)s, %(status)s, %(reason)s,
                                 %(error)s, %(exit_code)s, %(retry_hint)s, %(now)s) AS finished;

-- name: workload_ended
SELECT pgsched.workload_ended(%(run_id)s, %(lease_token)s) AS marked;

-- name: workload_ended_pinned
SELECT pgsched.workload_ended_pinned(%(run_id)s, %(lease_token)s, %(now)s) AS marked;

-- name: listen_for_cancel
SELECT pgsched.listen_for_cancel(%(run_id)s, %(lease_token)s) AS state;

-- name: adopt_lease
-- The owner's: the run takes `adopted`, a genuine earlier lease of it that its Job's pod
-- holds, fenced on the lease it was claimed with (sql/functions/adopt_lease.sql).
SELECT pgsched.adopt_lease(%(run_id)s, %(lease_token)s, %(adopted)s) AS adopted;

-- name: reestablish_claim
-- The owner's: a QUEUED run takes back a genuine lease of a claim the database lost, as
-- the job side's calls would (sql/functions/reestablish_claim.sql), within its limits.
SELECT pgsched.reestablish_claim(%(run_id)s, %(lease_token)s) AS reestablished;
