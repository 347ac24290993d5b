-- name: replication_state
-- What a failover of this server would lose. pg_stat_replication shows a row per
-- connected standby to every role (its details only to pg_monitor members, so sync_state
-- may read NULL: the settings are what count).
SELECT current_setting('synchronous_standby_names') AS synchronous_standby_names,
       current_setting('synchronous_commit') AS synchronous_commit,
       (SELECT count(*) FROM pg_stat_replication) AS standbys,
       (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))
           AS synchronous_standbys,
       pgsched.current_timeline() AS timeline;
