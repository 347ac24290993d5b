-- name: tenant_boundary
-- What the job role's logins could reach beyond their runs (db/boundary.py): a schema
-- others may create in on the default search_path, the advisory lock functions, and logins
-- without the limits that keep one from holding connections, locks or a transaction open.
WITH job AS (
    SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'pgsched_job'
), logins AS (
    SELECT r.rolname, r.rolconnlimit,
           (SELECT pg_catalog.array_agg(setting)
            FROM pg_catalog.pg_db_role_setting AS s, pg_catalog.unnest(s.setconfig) AS setting
            WHERE s.setrole = r.oid
              AND s.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database
                                        WHERE datname = pg_catalog.current_database())))
               AS settings
    FROM pg_catalog.pg_roles AS r, job
    WHERE r.rolcanlogin AND NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, job.oid, 'MEMBER')
)
SELECT
    EXISTS (SELECT FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
            WHERE n.nspname = 'public' AND a.privilege_type = 'CREATE'
              AND a.grantee <> n.nspowner) AS public_writable,
    EXISTS (SELECT FROM job WHERE pg_catalog.has_function_privilege(
                job.oid, 'pg_catalog.pg_advisory_lock(bigint)', 'EXECUTE')) AS job_advisory_locks,
    coalesce((SELECT pg_catalog.array_agg(rolname ORDER BY rolname) FROM logins
              WHERE rolconnlimit < 0
                 OR NOT EXISTS (SELECT FROM pg_catalog.unnest(settings) AS s
                                WHERE s LIKE 'statement\_timeout=%%'
                                  AND s <> 'statement_timeout=0')
                 OR NOT EXISTS (SELECT FROM pg_catalog.unnest(settings) AS s
                                WHERE s LIKE 'idle\_in\_transaction\_session\_timeout=%%'
                                  AND s <> 'idle_in_transaction_session_timeout=0')),
             '{}') AS unlimited_logins;
