-- Pools whose members' PoolReady condition may be stale (k8s/concurrencypools.py).
--
-- Whether a ScheduledJob's pool exists is part of its status (PoolReady), yet creating or
-- deleting a pool changes none of the job's runs, so the run-events outbox never asks for
-- that status to be rendered again. The pool's handler used to render its members'
-- statuses inside the transaction that stored or removed the pool: the patch reached the
-- API server before the commit, and a publisher rendering the same job in those
-- milliseconds still saw the old pool and wrote it last (PoolReady stayed True after the
-- pool was deleted, until the job's next run). Now the handler records the pool here in the
-- transaction that changes it, renders the members after the commit, and forgets the row
-- only when every member's status is written; a handler that failed or crashed in between
-- finds the row on its retry (or on the operator's restart: the pool is listed again, and
-- a pool being deleted keeps pgsched's finalizer until this is done).
--
-- `requested` changes whenever the pool changes again, so a refresh that began before a
-- second change does not forget the request the second change made.
--
-- A table of its own: the previous release neither writes nor reads it (a rolling upgrade
-- leaves its replicas' prepared statements alone, as with 0017).

CREATE TABLE pgsched.pool_member_refreshes (
    namespace text NOT NULL,
    name text NOT NULL,
    requested bigint NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE SEQUENCE pgsched.pool_member_refreshes_requested_seq
    OWNED BY pgsched.pool_member_refreshes.requested;
