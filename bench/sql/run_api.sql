-- The run API benchmarks (bench/run_api_connections.py, bench/run_api_flood.py).

-- name: run_api_sessions
-- The server's sessions right now, by who holds them: the run API's pool, its cancel
-- listener and its presence stamps (application names pgsched-run-api*), job pods' own
-- sessions (the sidecar's pgsched-sidecar-<run>), and every client backend.
SELECT count(*) FILTER (WHERE application_name = %(pool)s) AS pool,
       count(*) FILTER (WHERE application_name = %(stops)s) AS stops,
       count(*) FILTER (WHERE application_name = %(presence)s) AS presence,
       count(*) FILTER (WHERE application_name LIKE %(run_api)s) AS run_api,
       count(*) FILTER (WHERE application_name LIKE %(sidecar)s) AS sidecars,
       count(*) FILTER (WHERE backend_type = 'client backend') AS client_backends
FROM pg_stat_activity;

-- name: run_silence
-- How long the RUNNING runs have been silent, measured like the reaper's
-- heartbeat.timeoutSeconds (but without its allowance for the run API's absence): the
-- longest silence, and how many are past their timeout or never beat.
SELECT count(*) AS running,
       count(*) FILTER (WHERE r.heartbeat_at IS NULL) AS never_beat,
       extract(epoch FROM max(clock_timestamp() - r.heartbeat_at))::float8 AS longest_silence,
       count(*) FILTER (
           WHERE clock_timestamp() - r.heartbeat_at
                 > make_interval(secs => d.heartbeat_timeout_seconds)) AS past_timeout
FROM pgsched.job_runs AS r
JOIN pgsched.job_definitions AS d ON d.id = r.definition_id
WHERE r.status = 'RUNNING';

-- name: beat_since
-- RUNNING runs whose heartbeat_at moved past %(since)s, and those that did not.
SELECT count(*) FILTER (WHERE heartbeat_at > %(since)s) AS advanced,
       count(*) FILTER (WHERE heartbeat_at IS NULL OR heartbeat_at <= %(since)s) AS not_advanced
FROM pgsched.job_runs
WHERE status = 'RUNNING';


-- name: pods_start_now
-- The runs' start moved to now, when their pods start: making 2,000 runs and starting
-- their pods' processes takes the benchmark longer than a Job's pod takes to start, and
-- orphanTimeoutSeconds counts from started_at (no trigger fires: the status is unchanged).
UPDATE pgsched.job_runs SET started_at = now() WHERE status = 'RUNNING';
