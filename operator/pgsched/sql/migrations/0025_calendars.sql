-- Calendars (k8s/calendars.py, schedule/calendars.py) and unions of schedules.
--
-- A Calendar resource (namespace/name) is stored here in its resolved form: its dates,
-- merged ranges and date-based rule texts as JSON, its iCalendar import already read from
-- the ConfigMap and turned into ranges and rules, so the tick never talks to the API. A
-- ScheduledJob names calendars in spec.calendars.exclude (read from the stored spec, as
-- spec.pool is); an occurrence on an excluded day is materialized SKIPPED/CalendarExcluded.
-- `version` changes with every change of the resolved form: what a job's status was last
-- rendered from is comparable without the JSON.
--
-- spec.schedules (several cron/RRULE entries, their occurrences' union) is stored as
-- schedule_kind 'union' with the entries as JSON in `schedule`.

CREATE TABLE pgsched.calendars (
    namespace  text        NOT NULL,
    name       text        NOT NULL,
    resolved   jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);

ALTER TABLE pgsched.job_definitions
    DROP CONSTRAINT job_definitions_schedule_kind_check,
    ADD CONSTRAINT job_definitions_schedule_kind_check
        CHECK (schedule_kind IN ('cron', 'rrule', 'once', 'none', 'union'));

-- The live jobs that exclude a calendar (re-rendered when it changes).
CREATE INDEX job_definitions_calendars ON pgsched.job_definitions
    USING gin ((spec -> 'calendars' -> 'exclude'))
    WHERE deleted_at IS NULL AND spec ? 'calendars';
