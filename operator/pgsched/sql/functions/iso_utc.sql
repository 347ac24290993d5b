-- An instant as the operator's messages write it: ISO 8601 in UTC (pgsched/wording.py).

CREATE OR REPLACE FUNCTION pgsched.iso_utc(moment timestamp with time zone) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pg_catalog.to_char(moment AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

REVOKE ALL ON FUNCTION pgsched.iso_utc(moment timestamp with time zone) FROM PUBLIC;
