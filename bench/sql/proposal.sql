-- The prototype dispatcher of bench/proposal.py (an experiment, not the engine).

-- name: proposal_try_lock
-- Non-blocking per-definition locks: a definition another dispatcher is claiming right
-- now is skipped this time (its runs stay QUEUED), like SKIP LOCKED skips rows. Nothing
-- ever waits, so no lock order is needed and dispatchers never queue behind each other.
SELECT d AS id
FROM unnest(%(ids)s::uuid[]) AS d
WHERE pg_try_advisory_xact_lock(hashtextextended('dispatch:' || d::text, 0));

-- name: proposal_definitions
SELECT * FROM pgsched.job_definitions WHERE id = ANY(%(ids)s::uuid[]);

-- name: proposal_claim_call
SELECT * FROM bench.claim(%(batch)s, %(overshoot)s);

-- name: proposal_any_queued
SELECT EXISTS (SELECT 1 FROM pgsched.job_runs WHERE status = 'QUEUED') AS any;

-- name: proposal_claim_ids
-- bench.profile: the one-call claim alone, returning ids only (no rows to parse).
SELECT id FROM bench.claim(%(batch)s, %(overshoot)s);
