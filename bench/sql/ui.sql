-- Seeding for the UI benchmark (bench/ui.py): one busy definition on top of bench.seed's.

-- name: ui_seed_hot_history
-- A definition that ran every minute for months: finished runs one minute apart, newest
-- now, with a skipped occurrence every 50 and a failed-then-retried one every 97.
WITH d AS (SELECT id FROM pgsched.job_definitions WHERE namespace = 'bench' AND name = 'def-0')
INSERT INTO pgsched.job_runs
    (definition_id, status, trigger, scheduled_for, lease_token, started_at, finished_at,
     settled_at, reason, exit_code, k8s_job_name)
SELECT d.id,
       CASE WHEN g %% 50 = 0 THEN 'SKIPPED' WHEN g %% 97 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       'schedule', s.at,
       CASE WHEN g %% 50 = 0 THEN NULL ELSE gen_random_uuid() END,
       CASE WHEN g %% 50 = 0 THEN NULL ELSE s.at + interval '1 second' END,
       s.at + interval '20 seconds', s.at + interval '21 seconds',
       CASE WHEN g %% 50 = 0 THEN 'DeadlineMissed' WHEN g %% 97 = 0 THEN 'NonZeroExit'
            ELSE 'Succeeded' END,
       CASE WHEN g %% 50 = 0 THEN NULL WHEN g %% 97 = 0 THEN 1 ELSE 0 END,
       'def-0-' || g
FROM d, generate_series(1, %(count)s::int) AS g
CROSS JOIN LATERAL (SELECT date_trunc('minute', now()) - g * interval '1 minute' AS at) AS s;
