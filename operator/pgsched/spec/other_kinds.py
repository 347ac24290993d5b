"""The specs of the operator's other kinds: ConcurrencyPool, Calendar, NotificationPolicy.

They are checked here, below the k8s layer, so that the controller and the admission
webhook call the same function for each kind: a resource the webhook admits is one the
controller accepts, refused in the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgsched.engine import notifications
from pgsched.schedule import calendars
from pgsched.spec import notify
from pgsched.spec.checker import MAX_INT32, describe
from pgsched.validation import FieldError, Problems, SpecError


def pool_limit(spec: Any) -> int:
    """A ConcurrencyPool spec's ``limit``. Raises :class:`SpecError` naming the field.

    The CRD's schema refuses most of this at ``kubectl apply``; the controller and the
    admission webhook both call this for what slips past it (a CRD installed without its
    schema, an older one)."""
    limit = spec.get("limit") if isinstance(spec, Mapping) else None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_INT32:
        raise SpecError(
            [
                FieldError(
                    "spec.limit",
                    f"must be an integer of at least 1, got {describe(limit)}",
                    "limit: 2",
                )
            ]
        )
    return limit


def calendar(spec: Any, ics_texts: Mapping[str, str]) -> dict[str, Any]:
    """A Calendar spec's resolved form (``schedule.calendars.resolve``). Raises
    :class:`SpecError` naming every bad field; the controller and the admission webhook
    both call it (the webhook without the iCalendar texts, which it does not read)."""
    return calendars.resolve(spec, ics_texts)


def notification_policy(name: Any, spec: Any) -> dict[str, Any]:
    """A NotificationPolicy's spec, as its namespace's jobs use it (the shape of a
    ``spec.notify``). Raises :class:`SpecError` naming every bad field; the controller and
    the admission webhook both call it. Only the policy named ``default`` is in force (one
    per namespace, found without a selector or a ranking), so any other name is refused."""
    problems = Problems()
    if name != notifications.POLICY_NAME:
        problems.add(
            "metadata.name",
            f"{name!r}: a namespace has one NotificationPolicy, named {notifications.POLICY_NAME}",
            f"metadata: {{name: {notifications.POLICY_NAME}}}",
        )
    notify.validate_policy(spec, problems)
    problems.raise_if_any(SpecError)
    return dict(spec)
