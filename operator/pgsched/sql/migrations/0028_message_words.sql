-- Words the database's own messages share with the operator's (pgsched/wording.py):
-- counts with the right plural and instants in ISO 8601 (issue 26). Messages built by
-- format() embedded timestamptz values as text ("2026-12-03 06:28:20+00", in the
-- session's TimeZone) and counts with a fixed plural ("1 consecutive runs failed"); the
-- queries now call these two, so the reaper's and settle's messages read as every other
-- screen's: "no heartbeat since 2026-12-03T06:28:20Z", "1 consecutive run failed".
--
-- Pure, owned by the schema owner and executable by it alone (0021's default privileges).

CREATE FUNCTION pgsched.iso_utc(moment timestamptz) RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.to_char(moment AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

CREATE FUNCTION pgsched.plural(count bigint, singular text, many text) RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count::text || ' ' || CASE WHEN count = 1 THEN singular ELSE many END
$$;

REVOKE ALL ON FUNCTION pgsched.iso_utc(timestamptz), pgsched.plural(bigint, text, text)
    FROM PUBLIC;
