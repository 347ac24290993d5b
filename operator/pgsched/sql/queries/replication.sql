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

-- name: server_identity
-- Which cluster a server belongs to (a standby shares its primary's system identifier),
-- whether it takes writes, and on which WAL timeline (pgsched/db/primaries.py).
SELECT (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
       pg_is_in_recovery() AS in_recovery,
       -- (pgsched.current_timeline() inlined: job pods' role may call only the lease functions)
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
       END AS timeline;
