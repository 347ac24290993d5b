-- When the run API was served: job pods heartbeat through it (docs/run-api.md), so a time
-- when no operator replica served it is a time no run could beat, and the reaper must not
-- count it as a run's silence (the reaper's function over this table).
--
-- One row. Every replica serving the API stamps `seen_at` every few seconds; the first to
-- stamp after a gap (no stamp for longer than the gap the stamp names) also moves
-- `available_since` to that moment. Written only by the operator (the owner).

CREATE TABLE pgsched.run_api_presence (
    only_row        boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    available_since timestamptz NOT NULL,
    seen_at         timestamptz NOT NULL
);

REVOKE ALL ON TABLE pgsched.run_api_presence FROM PUBLIC;
