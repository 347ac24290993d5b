-- Error text cut to at most 8 KiB (bytes, UTF-8) ending in a marker; shorter text as is.

CREATE OR REPLACE FUNCTION pgsched.bounded_error(error text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    marker constant text := ' [... truncated by pgsched to 8 KiB]';
    budget constant integer := 8192 - pg_catalog.octet_length(marker);
    kept text;
BEGIN
    IF error IS NULL OR pg_catalog.octet_length(error) <= 8192 THEN
        RETURN error;
    END IF;
    kept := pg_catalog.left(error, budget);
    -- Characters take 1..4 bytes: drop at least a quarter of the excess each round.
    WHILE pg_catalog.octet_length(kept) > budget LOOP
        kept := pg_catalog.left(
            kept, pg_catalog.length(kept) - (pg_catalog.octet_length(kept) - budget + 3) / 4);
    END LOOP;
    RETURN kept || marker;
END;
$$;

REVOKE ALL ON FUNCTION pgsched.bounded_error(error text) FROM PUBLIC;
