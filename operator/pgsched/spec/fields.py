"""The spec's top-level fields, in one place.

``parse`` refuses any field not named here, and the CRD's schema must list exactly these
(tests/unit/test_crd.py). Which table a field is in says where the engine keeps it: the
engine's fields become the definition's columns, the extra ones are stored as given in its
``extra`` and read where they are used (each still checked by ``parse``).
"""

from __future__ import annotations

from pgsched.engine import jitter, parameters
from pgsched.schedule import window as windows

SCHEDULE_FIELDS = {"schedule": "cron", "rrule": "rrule", "runAt": "once"}
ENGINE_FIELDS = {
    *SCHEDULE_FIELDS,
    "schedules",
    "timeZone",
    "dstPolicy",
    "suspend",
    "maxConcurrentRuns",
    "concurrencyPolicy",
    "maxQueuedRuns",
    "startingDeadlineSeconds",
    "catchUp",
    "catchUpLimit",
    "activeDeadlineSeconds",
    "retryPolicy",
    "heartbeat",
    "cancelGraceSeconds",
    "failureSuspendThreshold",
    "after",
    "afterMode",
    "runAtInPast",
}
EXTRA_FIELDS = {
    "jobTemplate",
    "startTimeoutSeconds",
    "admissionTimeoutSeconds",
    "job",
    "successfulRunsHistoryLimit",
    "failedRunsHistoryLimit",
    "pool",
    "notify",
    "deadline",
    "calendars",
    jitter.FIELD,
    windows.FROM,
    windows.UNTIL,
    parameters.FIELD,
}
