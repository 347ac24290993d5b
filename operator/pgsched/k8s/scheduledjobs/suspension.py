"""Why a ScheduledJob is suspended: the ``pgsched.dev/suspend-reason`` annotation.

``spec.suspend`` is a boolean; the reason beside it is an annotation, not a spec field, so
giving or changing a reason is not a new generation (nothing is re-planned) and a GitOps
tool that owns the spec can leave it alone. ``pgsched suspend --reason "..."`` writes it
together with ``spec.suspend: true`` in one patch, and ``pgsched resume`` removes it in the
patch that sets ``spec.suspend: false``; ``kubectl annotate`` works too.

The operator stores it with the definition (``job_definitions.suspend_reason``) and shows
it while the job is suspended: the ``Suspended`` condition's message, the
``SKIPPED/Suspended`` rows' error, ``pgsched next``, the UI. The status also carries the
stored value (``status.suspendReason``), so a watch event tells the sync whether the
annotation changed without a database read.

The value is a person's note and is treated as hostile text: surrounding space is
trimmed, control characters become spaces and it is cut at :data:`MAX_REASON` characters
(then ``…``), so it can reach a condition message, an Event, a log line or the UI as is.
"""

from __future__ import annotations

from typing import Any

from pgsched.k8s import names

MAX_REASON = 256


def reason_of(annotations: dict[str, Any]) -> str | None:
    """The annotation's reason, normalized; None without one (or an empty one)."""
    value = annotations.get(names.ANNOTATION_SUSPEND_REASON)
    if value is None:
        return None
    text = "".join(char if char.isprintable() else " " for char in str(value)).strip()
    if not text:
        return None
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def shown(status: dict[str, Any] | None) -> str | None:
    """The reason the status says the definition holds."""
    value = (status or {}).get("suspendReason")
    return str(value) if value is not None else None
