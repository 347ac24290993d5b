"""Checks of the fields stored as given in the definition's ``extra`` (``fields.EXTRA_FIELDS``).

They are read later, where they are used (``engine.starts``, ``engine.jitter``,
``engine.notifications``, the Job built for a run), and a bad one found there would fail
runs long after the apply that could have refused it. The active window and the calendars
are ``bounds``'s; ``notify``, ``deadline`` and ``parameters`` have a module each.
"""

from __future__ import annotations

from collections.abc import Mapping

from pgsched import names
from pgsched.engine import jitter, starts
from pgsched.spec import deadline, notify, parameters
from pgsched.spec.checker import Checker, describe


def validate(check: Checker) -> None:
    notify.validate(check)
    deadline.validate(check)
    for key in ("successfulRunsHistoryLimit", "failedRunsHistoryLimit"):
        check.integer(check.spec, key, path=key, default=None, minimum=0, example=f"{key}: 3")
    # Read from the stored spec by engine.starts (with its defaults).
    for key, default in (
        ("startTimeoutSeconds", starts.START_TIMEOUT_SECONDS),
        ("admissionTimeoutSeconds", starts.ADMISSION_TIMEOUT_SECONDS),
    ):
        check.integer(
            check.spec, key, path=key, default=None, minimum=1, example=f"{key}: {default}"
        )
    spread = check.integer(
        check.spec,
        jitter.FIELD,
        path=jitter.FIELD,
        default=0,
        minimum=0,
        example="jitterSeconds: 300",
    )
    if spread is not None and spread > jitter.MAX_SECONDS:
        check.fail(
            jitter.FIELD,
            f"{spread} is more than {jitter.MAX_SECONDS} (an hour): a longer delay is a"
            " different schedule, not jitter",
            "jitterSeconds: 300",
        )
    parameters.validate(check)
    pool = check.spec.get("pool")
    if pool is not None and not (isinstance(pool, str) and names.OBJECT_NAME.match(pool)):
        check.fail(
            "pool",
            f"{pool!r} is not a ConcurrencyPool name (lowercase letters, digits, '-' or '.')",
            "pool: warehouse",
        )
    template = check.spec.get("jobTemplate")
    if template is not None and not isinstance(template, Mapping):
        check.fail("jobTemplate", f"must be an object, got {describe(template)}")
    job = check.spec.get("job")
    if job is None:
        return
    if not isinstance(job, Mapping):
        check.fail("job", f"must be an object, got {describe(job)}", "job: {kind: report}")
        return
    check.unknown(job, {"kind", "args", "modules"}, "job.")
    kind = job.get("kind")
    if not isinstance(kind, str) or not names.JOB_KIND.match(kind):
        check.fail(
            "job.kind",
            f"{kind!r} is not a job kind name (lowercase letters, digits, '.', '_' or '-')",
            "kind: nightly-report",
        )
    args = job.get("args", {})
    if not isinstance(args, Mapping):
        check.fail("job.args", f"must be an object, got {describe(args)}", "args: {days: 7}")
    modules = job.get("modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(module, str) and names.DOTTED_NAME.match(module) for module in modules
    ):
        check.fail(
            "job.modules",
            f"must be a list of importable Python module names, got {modules!r}",
            "modules: [myapp.jobs]",
        )
