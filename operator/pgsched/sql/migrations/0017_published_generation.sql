-- Which generation of each ScheduledJob the operator has published: the status that shows
-- it and its Scheduled (or InvalidSpec) Event (issue 17 #2, k8s/scheduledjobs.py).
--
-- Writing a new ScheduledJob's finalizer makes the API server send a MODIFIED event whose
-- status does not show the generation yet (the status patch is the writer's next request);
-- synced, that event asked for the status and the Event again, and with a fleet of 10,000
-- waiting for the API budget the second request came long after the first was done: a
-- second status patch and Event POST per ScheduledJob, 126 a second for minutes. The writer
-- now records the generation it published here, and both the sync (deciding what to ask
-- for) and the writer (before it writes) read it with the definition: what was published
-- is not asked for again, whichever replica published it, however late the echo comes.
--
-- A table of its own, not a column of job_definitions: adding a column changes the row
-- type of every `SELECT * FROM job_definitions` a running replica of the previous release
-- has prepared (psycopg prepares a statement after five runs), and each would then fail
-- with "cached plan must not change result type" until its connection closed — a rolling
-- upgrade would break the replicas it has not replaced yet (tests/db/test_history.py races
-- the previous release's dispatchers across the migrations). The previous release never
-- reads this table. Publishing is not a change of the definition either: no UPDATE of
-- job_definitions, so its version (0014) stays and the dispatcher's kept definitions too.

CREATE TABLE pgsched.published_generations (
    definition_id uuid PRIMARY KEY REFERENCES pgsched.job_definitions (id) ON DELETE CASCADE,
    generation bigint NOT NULL
);
