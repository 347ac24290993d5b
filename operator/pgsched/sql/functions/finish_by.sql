-- The finish-by instant of a run scheduled for `scheduled_for` under spec.deadline: a
-- duration after it ('2h', '90m', '1h30m'), or the first wall-clock time ('06:00') strictly
-- after it in the schedule's zone. NULL without a deadline. The spec is validated before
-- it is stored (pgsched.engine.deadlines), so the casts cannot fail.

CREATE OR REPLACE FUNCTION pgsched.finish_by(deadline text, scheduled_for timestamp with time zone, zone text) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT CASE
        WHEN deadline IS NULL THEN NULL
        WHEN deadline ~ '^[0-9]{2}:[0-9]{2}$' THEN (
            SELECT CASE WHEN candidate > scheduled_for THEN candidate
                        ELSE ((local_day + 1) + deadline::time) AT TIME ZONE zone END
            FROM (SELECT (scheduled_for AT TIME ZONE zone)::date AS local_day) AS d,
                 LATERAL (SELECT (d.local_day + deadline::time) AT TIME ZONE zone AS candidate) AS c)
        ELSE scheduled_for + deadline::interval
    END
$_$;

REVOKE ALL ON FUNCTION pgsched.finish_by(deadline text, scheduled_for timestamp with time zone, zone text) FROM PUBLIC;
