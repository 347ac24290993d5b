-- A count with the right plural, as the operator's messages write it (pgsched/wording.py).

CREATE OR REPLACE FUNCTION pgsched.plural(count bigint, singular text, many text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT count::text || ' ' || CASE WHEN count = 1 THEN singular ELSE many END
$$;

REVOKE ALL ON FUNCTION pgsched.plural(count bigint, singular text, many text) FROM PUBLIC;
