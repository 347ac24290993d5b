"""NotificationPolicies: a namespace's default notifications, stored for the trigger.

A NotificationPolicy named ``default`` applied or changed → its spec checked
(``spec.notification_policy``, the path the admission webhook takes too) and upserted
into ``pgsched.notification_policies``; the database derives the notifications of every
later change of the namespace's jobs from it (migration 0031), so nothing restarts. The
jobs whose notifications follow it get their statuses rendered again
(``status.notifications`` says where theirs come from) when what they show of it
changed — a new URL re-renders none of them. Deleted → removed, so its
notifications stop with the next change; those jobs re-rendered; pgsched's finalizer
released (so a deletion while no operator runs is still seen). An invalid policy changes
nothing stored (the last valid form stays in force, as a Calendar's does); its ``Ready``
condition says what is wrong. A policy of another name is never stored: the CRD refuses
it, and a cluster without that rule gets ``Ready=False`` naming the one name that works.

Members are re-rendered after the change commits (as ``calendars`` does, for the same
reason); a re-render cut short by an API error is redone by the retry.
"""

from __future__ import annotations

import logging
from typing import Any

from pgsched import spec as spec_module
from pgsched.engine import notifications
from pgsched.k8s.client import api
from pgsched.k8s.kinds.reconciler import SettingsReconciler
from pgsched.k8s.names import Obj

log = logging.getLogger(__name__)


class NotificationPolicies(
    SettingsReconciler, kind="NotificationPolicy", path=api.notification_policy_path
):
    def apply(self, body: Obj) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            notify = spec_module.notification_policy(name, body.get("spec"))
        except spec_module.SpecError as error:
            log.warning(
                "NotificationPolicy %s/%s: %s; the stored form stays", namespace, name, error
            )
            self.write_ready(body, ready=False, reason="InvalidSpec", message=str(error))
            return
        if not self.hold(meta):
            return
        with self._pool.connection() as conn:
            with conn.transaction():
                shown = notifications.upsert_policy(conn, namespace, notify, now=self._clock())
            if shown:
                log.info("NotificationPolicy %s/%s stored", namespace, name)
                self._unrendered.add(namespace)
            self._render(conn, namespace)
        self.write_ready(body, ready=True, reason="InForce", message=_summary(notify))

    def forget(self, namespace: str, name: str) -> None:
        if name != notifications.POLICY_NAME:
            return  # never stored
        with self._pool.connection() as conn:
            with conn.transaction():
                removed = notifications.delete_policy(conn, namespace)
            if removed:
                log.info(
                    "NotificationPolicy %s/%s deleted: its notifications stop", namespace, name
                )
                self._unrendered.add(namespace)
            self._render(conn, namespace)

    def _render(self, conn: Any, namespace: str) -> None:
        self.render_members(conn, namespace, lambda: notifications.policy_members(conn, namespace))


def _summary(notify: dict[str, Any]) -> str:
    _, targets = notifications.shown(notify)
    return f"the namespace's jobs without spec.notify notify {', '.join(targets)}"
