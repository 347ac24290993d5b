-- Which generation of each ScheduledJob the operator has published: the status that shows
-- it and its Scheduled (or InvalidSpec) Event (issue 17 #2, k8s/scheduledjobs.py).
--
-- Writing a new ScheduledJob's finalizer makes the API server send a MODIFIED event whose
-- status does not show the generation yet (the status patch is the writer's next request);
-- synced, that event asked for the status and the Event again, and with a fleet of 10,000
-- waiting for the API budget the second request came long after the first was done: a
-- second status patch and Event POST per ScheduledJob, 126 a second for minutes. The writer
-- now records the generation it published here, and both the sync (deciding what to ask
-- for) and the writer (before it writes) read it: what was published is not asked for
-- again, whichever replica published it, however late the echo comes.
--
-- Like materialize's bookkeeping, publishing is not a change of the definition: the
-- version trigger (0014) leaves the version alone, so the dispatcher's kept definitions
-- stay kept.
--
-- Rolling upgrade: the column is nullable and only this release reads it; a replica of
-- the previous release ignores it (rows are read by column name) and publishes as before.

ALTER TABLE pgsched.job_definitions ADD COLUMN published_generation bigint;

CREATE OR REPLACE FUNCTION pgsched.bump_definition_version() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    probe pgsched.job_definitions;
BEGIN
    probe := NEW;
    probe.next_run_at := OLD.next_run_at;
    probe.last_scheduled_for := OLD.last_scheduled_for;
    probe.pool := OLD.pool;  -- generated after BEFORE triggers; follows spec and namespace
    probe.published_generation := OLD.published_generation;
    probe.version := OLD.version;
    IF probe IS DISTINCT FROM OLD THEN
        NEW.version := OLD.version + 1;
    ELSE
        NEW.version := OLD.version;
    END IF;
    RETURN NEW;
END;
$$;
