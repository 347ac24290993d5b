-- The one-call prototype of bench/proposal.py (an experiment, not the engine).

-- name: proposal_definitions
SELECT * FROM pgsched.job_definitions WHERE id = ANY(%(ids)s::uuid[]);

-- name: proposal_claim_call
SELECT * FROM bench.claim(%(batch)s, %(overshoot)s);

-- name: proposal_any_queued
SELECT EXISTS (SELECT 1 FROM pgsched.job_runs WHERE status = 'QUEUED') AS any;

-- name: proposal_claim_ids
-- bench.profile: the one-call claim alone, returning ids only (no rows to parse).
SELECT id FROM bench.claim(%(batch)s, %(overshoot)s);
