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

-- name: replication_progress
-- How far the WAL goes now (the insert position: past the end of every commit made so
-- far) and how far every connected streaming standby has flushed it, on this server's
-- timeline: a request carried out is durable against a failover once the least flushed
-- position reaches the position taken after its commit (pgsched/db/replication.py).
-- Physical standbys only (a logical walsender serves a database, it is never promoted;
-- pg_basebackup's is in state 'backup'). A standby connected but not flushing yet
-- ('startup') counts as having flushed nothing. Its position is shown only to
-- pg_read_all_stats members: the others' are counted as unseen.
SELECT pgsched.current_timeline() AS timeline,
       (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS position,
       (SELECT min(coalesce(r.flush_lsn, '0/0'::pg_lsn) - '0/0'::pg_lsn)::bigint
        FROM pg_stat_replication AS r
        JOIN pg_stat_activity AS a ON a.pid = r.pid
        WHERE a.datid IS NULL AND r.state IS NOT NULL AND r.state <> 'backup') AS least_flushed,
       (SELECT count(*)
        FROM pg_stat_replication AS r
        JOIN pg_stat_activity AS a ON a.pid = r.pid
        WHERE a.datid IS NULL AND r.state IS NULL) AS unseen;
