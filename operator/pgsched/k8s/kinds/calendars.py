"""Calendars: their resolved days go to the database, where the tick and statuses read them.

A Calendar applied or changed → its spec checked and resolved (``spec.calendar``; an
``ics.configMapRef`` is read from the ConfigMap in the Calendar's namespace and parsed by
the strict reader of ``schedule.ics``) and upserted into ``pgsched.calendars``; the jobs
that exclude it get their statuses rendered again (``nextRuns``, ``CalendarsReady``).
A Calendar deleted → removed, its jobs re-rendered (their condition now names it missing),
and pgsched's finalizer released. An invalid Calendar changes nothing stored (the last
valid form stays in force, as a ScheduledJob's last valid generation does); its own
``Ready`` condition says what is wrong.

A ConfigMap is not watched (the operator would have to watch every ConfigMap of every
namespace): a Calendar that imports one is read again every :data:`REREAD_SECONDS`, so
an edited holiday feed applies within minutes (or at once, when the Calendar is touched).
Members are re-rendered after the change commits (as ``concurrencypools`` does, for the
same reason); a re-render cut short by an API error is redone by the retry.
"""

from __future__ import annotations

import logging
from typing import Any

from pgsched import spec as spec_module
from pgsched.engine import calendars
from pgsched.k8s.client import api
from pgsched.k8s.kinds.reconciler import SettingsReconciler
from pgsched.k8s.names import Obj
from pgsched.schedule import calendars as calendar_days
from pgsched.validation import Problems

log = logging.getLogger(__name__)

REREAD_SECONDS = 300.0


class Calendars(SettingsReconciler, kind="Calendar", path=api.calendar_path):
    def apply(self, body: Obj) -> float | None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        spec = body.get("spec") or {}
        if not self.hold(meta):
            return None
        try:
            resolved = spec_module.calendar(spec, self._ics_texts(namespace, spec))
        except spec_module.SpecError as error:
            log.warning("Calendar %s/%s: %s; the stored form stays", namespace, name, error)
            self.write_ready(body, ready=False, reason="InvalidSpec", message=str(error))
            return self._reread(spec)
        with self._pool.connection() as conn:
            with conn.transaction():
                changed = calendars.upsert(conn, namespace, name, resolved, now=self._clock())
            if changed:
                log.info("Calendar %s/%s stored", namespace, name)
                self._unrendered.add((namespace, name))
            self._render(conn, namespace, name)
        self.write_ready(body, ready=True, reason="Resolved", message=_summary(resolved))
        return self._reread(spec)

    def _ics_texts(self, namespace: str, spec: Any) -> dict[str, str]:
        """The iCalendar text of each section that imports one; a missing ConfigMap or
        key is the Calendar's error (raised as ``SpecError``), not an outage."""
        texts: dict[str, str] = {}
        problems = Problems()
        for section in calendar_days.SECTIONS:
            ref = calendar_days.ics_reference(spec, section)
            if ref is None:
                continue
            config_map, key = ref
            where = f"spec.{section}.ics.configMapRef"
            try:
                found = self._kube.get(
                    api.path_of(namespace=namespace, plural="configmaps", name=config_map)
                )
            except api.ApiError as error:
                if not error.not_found:
                    raise
                problems.add(
                    where, f"ConfigMap {config_map} does not exist in namespace {namespace}"
                )
                continue
            text = (found.get("data") or {}).get(key)
            if not isinstance(text, str):
                problems.add(where, f"ConfigMap {config_map} has no data key {key}")
                continue
            texts[section] = text
        problems.raise_if_any(spec_module.SpecError)
        return texts

    def forget(self, namespace: str, name: str) -> None:
        with self._pool.connection() as conn:
            with conn.transaction():
                removed = calendars.delete(conn, namespace, name)
            if removed:
                log.info("Calendar %s/%s deleted: the jobs that name it say so", namespace, name)
                self._unrendered.add((namespace, name))
            self._render(conn, namespace, name)

    def _render(self, conn: Any, namespace: str, name: str) -> None:
        self.render_members(
            conn, (namespace, name), lambda: calendars.members(conn, namespace, name)
        )

    @staticmethod
    def _reread(spec: Any) -> float | None:
        imports = any(calendar_days.ics_reference(spec, s) for s in calendar_days.SECTIONS)
        return REREAD_SECONDS if imports else None


def _summary(resolved: dict[str, Any]) -> str:
    exclude = resolved.get("exclude") or {}
    parts = [
        f"{len(exclude.get('dates') or [])} dates",
        f"{len(exclude.get('ranges') or [])} ranges",
        f"{len(exclude.get('rules') or [])} rules",
    ]
    return f"excludes {', '.join(parts)}" + (
        " (with exceptions)" if resolved.get("include") else ""
    )
