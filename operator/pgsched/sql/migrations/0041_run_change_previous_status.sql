-- What a run's status was before a change: a watch of runs by phase
-- (`kubectl get runs -w --field-selector status.phase=RUNNING`) must send DELETED when a
-- run leaves the phase and ADDED when it enters it, as the API server does for a field
-- selector, and for that it must know where the run came from. The status-change trigger
-- (functions/record_run_status_changes.sql) has it at hand; the watch's copy of the
-- outbox (functions/record_run_changes.sql) keeps it. NULL: a run's creation, a note that
-- changes no status, or a change recorded before this migration.

ALTER TABLE pgsched.run_events ADD COLUMN previous_status text;
ALTER TABLE pgsched.run_changes ADD COLUMN previous_status text;
