-- Outcomes re-read from Kubernetes after a failover (issue 30, item 2).
--
-- With asynchronous replication a failover can lose a run's end: the new primary has the
-- run RUNNING again while its Job finished long ago. Nothing on the new primary says so;
-- the run used to wait heartbeat.timeoutSeconds for its verdict (or the resync's next
-- round). The API server still knows: so once per new WAL timeline the operator compares
-- every run the lost WAL could have touched — RUNNING runs, and due QUEUED runs whose Job
-- exists (a lost claim) — with its Job, at once (pgsched/k8s/revalidation.py).
--
-- This table records those passes, one row per timeline, so that replicas share one pass
-- and never repeat a finished one. A timeline without a row is owed a pass: this
-- migration writes the row of the timeline it runs on (nothing was lost there), so the
-- first row an operator writes itself is that of a promoted standby's new timeline. The
-- pass walks the runs by id (after_id: the last one it compared) up to the last id of the
-- timelines before (ids are never reused, migration 0007: each timeline has its own block
-- of 2^40, so runs created on the new timeline are not the lost WAL's). A replica holds
-- the pass for one batch at a time (claimed_until), so a replica that dies mid-batch
-- leaves it to the others after that bound. The owner's alone: no grant to the job role.
CREATE TABLE pgsched.timeline_revalidations (
    timeline bigint PRIMARY KEY,
    after_id bigint NOT NULL DEFAULT 0,
    compared bigint NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
REVOKE ALL ON TABLE pgsched.timeline_revalidations FROM PUBLIC;

INSERT INTO pgsched.timeline_revalidations (timeline, finished_at)
VALUES (pgsched.current_timeline(), now());
