-- A job's own notify configuration merged over its NotificationPolicy's.

CREATE OR REPLACE FUNCTION pgsched.effective_notify(own_notify jsonb, policy jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE
        WHEN own IS NULL THEN
            CASE WHEN policy IS NOT NULL THEN
                jsonb_build_object('failedOn', coalesce(policy->'failedOn', '"FinalAttempt"'),
                                   'targets', policy->'targets',
                                   'source', 'NotificationPolicy default') END
        WHEN (own->>'inherit') IS DISTINCT FROM 'true' THEN
            CASE WHEN own ? 'targets' THEN
                jsonb_build_object('failedOn', coalesce(own->'failedOn', '"FinalAttempt"'),
                                   'targets', own->'targets', 'source', 'spec.notify')
            ELSE jsonb_build_object('failedOn', '"FinalAttempt"'::jsonb, 'targets', '[]'::jsonb,
                                    'source', 'none (spec.notify.inherit: false)') END
        ELSE jsonb_build_object(
            'failedOn', coalesce(own->'failedOn', policy->'failedOn', '"FinalAttempt"'),
            'targets', (
                SELECT coalesce(jsonb_agg(t.target ORDER BY t.side, t.position), '[]'::jsonb)
                FROM (
                    SELECT 1 AS side, p.position, p.target
                    FROM jsonb_array_elements(coalesce(policy->'targets', '[]'::jsonb))
                         WITH ORDINALITY AS p(target, position)
                    WHERE NOT EXISTS (
                        SELECT FROM jsonb_array_elements(coalesce(own->'targets', '[]'::jsonb))
                            AS o(target)
                        WHERE o.target->>'name' = p.target->>'name')
                    UNION ALL
                    SELECT 2, o.position, o.target
                    FROM jsonb_array_elements(coalesce(own->'targets', '[]'::jsonb))
                         WITH ORDINALITY AS o(target, position)
                ) AS t),
            'source', CASE WHEN policy IS NULL
                           THEN 'spec.notify (inherit: true, but no NotificationPolicy default)'
                           ELSE 'spec.notify and NotificationPolicy default' END)
    END
    -- A JSON null (`notify: null` stored by a client that kept it) is no spec.notify.
    FROM (SELECT nullif(own_notify, 'null'::jsonb) AS own) AS o
$$;

REVOKE ALL ON FUNCTION pgsched.effective_notify(own_notify jsonb, policy jsonb) FROM PUBLIC;
