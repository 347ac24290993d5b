-- Least privilege for job pods.
--
-- The operator's role owns the schema. Job pods (the heartbeat sidecar, the SDK runner)
-- get a role that can call the three lease functions and nothing else: no table access
-- at all. The functions are SECURITY DEFINER with a fixed search_path and act only on
-- the run whose id *and* lease token the caller presents, so a job can neither touch
-- another run nor read anyone's data.
--
-- Creating the group role needs CREATEROLE; managed databases often deny it to the
-- application user. Then the migration skips it and the README says how to create it.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgsched_job') THEN
        IF (SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user) THEN
            CREATE ROLE pgsched_job NOLOGIN;
        ELSE
            RAISE NOTICE 'role pgsched_job does not exist and % may not create roles; '
                'create it as an administrator: CREATE ROLE pgsched_job NOLOGIN; '
                'then run pgsched migrate again', current_user;
        END IF;
    END IF;
END;
$$;

-- Nothing in the schema is public: functions are executable by PUBLIC by default.
REVOKE ALL ON SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pgsched FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgsched FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA pgsched REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgsched_job') THEN
        GRANT USAGE ON SCHEMA pgsched TO pgsched_job;
        GRANT EXECUTE ON FUNCTION
            pgsched.heartbeat(bigint, uuid, timestamptz),
            pgsched.lease_state(bigint, uuid),
            pgsched.finish_run(bigint, uuid, text, text, text, integer, text, timestamptz)
        TO pgsched_job;
    END IF;
END;
$$;
