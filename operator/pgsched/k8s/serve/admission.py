"""What the admission webhook decides: the controller's own validation, at ``kubectl apply``.

A ScheduledJob, ConcurrencyPool, Calendar or NotificationPolicy the controller would mark ``Ready=False`` is refused
when it is applied, with the very message the condition would carry (``spec.parse`` and
``spec.pool_limit`` are the one code path; ``webhook`` only carries the answer to the API
server). Three rules keep the webhook from refusing what the controller accepts:

- an update that leaves ``spec`` as it was always passes — a GitOps re-sync of an
  unchanged manifest, the operator's own finalizer and annotation patches, a deletion —
  even if the spec would be refused today (it slipped in while the webhook was down; the
  controller's condition says so);
- a ``runAt`` in the past is refused only when it is new: on create, or when an update
  changes it (as the controller refuses only a runAt it has not accepted before), so a
  finished one-shot re-applied months later still passes;
- "now" is this machine's clock (``db.clock.local``); the controller uses the
  database's. They differ by little next to ``spec.RUN_AT_SLACK``.

What needs the database — a ``spec.after`` that closes a cycle — stays the controller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pgsched import spec as spec_module
from pgsched.k8s import names
from pgsched.k8s.names import Obj


def check_scheduled_job(new: Obj, old: Obj | None, *, now: datetime) -> None:
    """Raise ``spec.SpecError`` if the controller would refuse ``new``; ``old`` is the
    object before an update (None on create)."""
    spec = new.get("spec")
    if old is not None and _unchanged(spec, old):
        return
    meta = new.get("metadata") or {}
    run_at = spec.get("runAt") if isinstance(spec, Mapping) else None
    old_spec = (old or {}).get("spec")
    old_run_at = old_spec.get("runAt") if isinstance(old_spec, Mapping) else None
    new_run_at = isinstance(run_at, str) and (
        not isinstance(old_run_at, str) or old_run_at.strip() != run_at.strip()
    )
    spec_module.parse(
        dict(spec or {}),  # as the controller reads it
        hash_seed=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        anchor=_created(meta, now),
        now=now,
        run_at_not_before=now if new_run_at else None,
    )


def check_pool(new: Obj, old: Obj | None) -> None:
    """Raise ``spec.SpecError`` if the controller would ignore the pool ``new``."""
    spec = new.get("spec")
    if old is not None and _unchanged(spec, old):
        return
    spec_module.pool_limit(spec or {})


def check_calendar(new: Obj, old: Obj | None) -> None:
    """Raise ``spec.SpecError`` if the controller would refuse the Calendar ``new``. Its
    iCalendar import is the controller's to read and check (it needs the ConfigMap)."""
    spec = new.get("spec")
    if old is not None and _unchanged(spec, old):
        return
    spec_module.calendar(spec or {}, {})


def check_notification_policy(new: Obj, old: Obj | None) -> None:
    """Raise ``spec.SpecError`` if the controller would refuse the NotificationPolicy ``new``."""
    spec = new.get("spec")
    if old is not None and _unchanged(spec, old):
        return
    spec_module.notification_policy((new.get("metadata") or {}).get("name"), spec)


def _unchanged(spec: Any, old: Obj) -> bool:
    return bool(spec == old.get("spec"))


def _created(meta: Mapping[str, Any], now: datetime) -> datetime:
    """The creation time, the RRULE's default DTSTART day, as the controller takes it
    (the API server sets it before validating admission, also on create)."""
    stamp = meta.get("creationTimestamp")
    if not isinstance(stamp, str):
        return now
    return names.timestamp(stamp)
