-- The run-events outbox remembers each change's due instant, so the publisher can drain it
-- fairly across instants (issue 17 #4, k8s/publisher.py, "Fair turns").
--
-- A stampede (5,000 ScheduledJobs on `0 * * * *`) puts two rows per run on the outbox
-- (QUEUED when materialized, RUNNING when launched), all of one due instant. Drained
-- oldest first, the statuses and Events of a run due a second later waited behind all of
-- them (2.5 minutes in the stampede benchmark). The publisher now lets due instants take
-- turns: every instant's first waiting ScheduledJob before any instant's second
-- (claim_run_events). That needs each pending row's instant: read from job_runs, it is one
-- lookup in every month partition for every pending row at every claim. The outbox row
-- carries it instead, written by the triggers that write the row.
--
-- Rolling upgrade: the column is nullable. The triggers are replaced here, so every run
-- status change fills it whichever release made it; settle's notes (NOT_RETRIED,
-- AUTO_SUSPENDED) are inserted by queries, and a replica of the previous release inserts
-- them without it. Such a row is published like any other, its turn among the other rows
-- without an instant (a handful, during a roll). Rows already pending get their run's.

ALTER TABLE pgsched.run_events ADD COLUMN scheduled_for timestamptz;

UPDATE pgsched.run_events AS e
SET scheduled_for = r.scheduled_for
FROM pgsched.job_runs AS r
WHERE r.id = e.run_id;

CREATE OR REPLACE FUNCTION pgsched.record_inserted_runs() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO pgsched.run_events
        (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger, n.scheduled_for
    FROM new_rows AS n;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.record_run_status_changes() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO pgsched.run_events
        (run_id, definition_id, status, reason, attempt, trigger, scheduled_for)
    SELECT n.id, n.definition_id, n.status, n.reason, n.attempt, n.trigger, n.scheduled_for
    FROM new_rows AS n
    JOIN old_rows AS o ON o.id = n.id
    WHERE o.status IS DISTINCT FROM n.status;
    RETURN NULL;
END;
$$;
