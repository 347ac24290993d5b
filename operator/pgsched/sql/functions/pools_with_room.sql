-- The pools of the candidates within their definition's room (the n-th candidate of a
-- definition with room k, n <= k), that are not locked yet: what a phase-two lock needs.

CREATE OR REPLACE FUNCTION pgsched.pools_with_room(cand_defs uuid[], lim_ids uuid[], lim_max integer[], lim_deleted boolean[], lim_running bigint[], lim_pool text[], locked_pools text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce(array_agg(DISTINCT l.pool), '{}')
    FROM (
        SELECT c.d, row_number() OVER (PARTITION BY c.d ORDER BY c.ord) AS n
        FROM unnest(cand_defs) WITH ORDINALITY AS c(d, ord)
    ) AS c
    JOIN unnest(lim_ids, lim_max, lim_deleted, lim_running, lim_pool)
        AS l(id, max_runs, deleted, running, pool) ON l.id = c.d
    WHERE NOT l.deleted AND l.pool IS NOT NULL AND c.n <= l.max_runs - l.running
      AND NOT l.pool = ANY(locked_pools);
$$;

REVOKE ALL ON FUNCTION pgsched.pools_with_room(cand_defs uuid[], lim_ids uuid[], lim_max integer[], lim_deleted boolean[], lim_running bigint[], lim_pool text[], locked_pools text[]) FROM PUBLIC;
