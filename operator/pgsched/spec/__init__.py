"""Validation of a ScheduledJob spec into the engine's definition settings.

The CRD's OpenAPI schema rejects what it can at ``kubectl apply`` (types, enums, ranges,
one schedule kind). Everything it cannot check — that a cron expression parses, that a time
zone exists, that heartbeat timeouts are consistent — is checked here, before anything
touches the database. Every problem found is reported at once, each naming the field, what
is wrong with the value, and a valid example::

    spec.timeZone: unknown time zone 'Europe/Sofiya'; use an IANA name from the tz
    database (example: America/New_York)

The same function validates specs from the operator, the CLI and tests, so a spec the CLI
accepts is a spec the operator accepts.

The package, one module a job: ``scheduledjob`` holds ``parse``, which reads the spec
section by section through ``checker`` (the value reader) against ``fields`` (the
top-level fields); the sections are ``schedules``, ``run_at``, ``upstreams``, ``bounds``,
``retries``, ``heartbeat`` and ``extra`` (which calls ``notify``, ``deadline`` and
``parameters``). ``other_kinds`` checks the specs of the
ConcurrencyPools, Calendars and NotificationPolicies.
"""

from __future__ import annotations

from pgsched.spec.bounds import MAX_CALENDARS
from pgsched.spec.checker import MAX_INT32
from pgsched.spec.other_kinds import calendar, notification_policy, pool_limit
from pgsched.spec.run_at import RUN_AT_SLACK
from pgsched.spec.scheduledjob import parse
from pgsched.spec.schedules import VALIDATION_STEPS
from pgsched.spec.upstreams import MAX_UPSTREAMS
from pgsched.validation import FieldError, SpecError

__all__ = [
    "MAX_CALENDARS",
    "MAX_INT32",
    "MAX_UPSTREAMS",
    "RUN_AT_SLACK",
    "VALIDATION_STEPS",
    "FieldError",
    "SpecError",
    "calendar",
    "notification_policy",
    "parse",
    "pool_limit",
]  # the errors are validation's, named here too
