-- Who asked for a manual or backfill run (issue 25 #10, k8s/commands.py).
--
-- `pgsched run-now` and `pgsched backfill` go through the Kubernetes API server by
-- default: the CLI writes the request and its requester as annotations on the
-- ScheduledJob (pgsched.dev/run-now and pgsched.dev/run-now-requested-by, ...), the chart's
-- ValidatingAdmissionPolicy refuses a requester that is not the user the API server
-- authenticated, and the operator records the requester here for the runs it queues. The
-- administrator's path (`--database`, the schema owner's DSN) records the database login
-- and the machine's user instead, and says that it bypassed Kubernetes RBAC.
--
-- A table of its own, not a column of job_runs: a new column changes the row type of the
-- `SELECT * FROM job_runs` a replica of the previous release has prepared, which then fails
-- until its connection closes (see 0017). Runs queued by the schedule, retries and chains
-- have no row; a request without a requester annotation (written by hand with kubectl) has
-- none either, and is shown as "unknown" (the API server's audit log names the user).
--
-- Keyed by the run id alone (ids are unique across job_runs' partitions, 0012), without a
-- foreign key to the run (a partitioned table's key includes scheduled_for): rows of runs
-- whose month retention dropped stay until their ScheduledJob's definition is purged; they
-- are a few short rows per manual request.

CREATE TABLE pgsched.run_requesters (
    run_id bigint PRIMARY KEY,
    definition_id uuid NOT NULL REFERENCES pgsched.job_definitions (id) ON DELETE CASCADE,
    requested_by text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 512)
);

CREATE INDEX run_requesters_definition_id ON pgsched.run_requesters (definition_id);
