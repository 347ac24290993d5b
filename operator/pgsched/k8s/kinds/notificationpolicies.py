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
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgsched import spec as spec_module
from pgsched.db import clock
from pgsched.engine import notifications
from pgsched.k8s.client import api, controller, finalizers
from pgsched.k8s.client.watch import Event
from pgsched.k8s.kinds import ready as ready_condition
from pgsched.k8s.names import Obj
from pgsched.k8s.reporting.publisher import Publisher

log = logging.getLogger(__name__)


class NotificationPolicies:
    def __init__(
        self,
        pool: ConnectionPool[Any],
        kube: api.KubeApi,
        publisher: Publisher,
        *,
        clock: Callable[[], datetime | None],
    ) -> None:
        self._pool = pool
        self._kube = kube
        self._publisher = publisher
        self._clock = clock
        # Namespaces whose members' statuses are still to be rendered after a change.
        self._unrendered: set[str] = set()

    def handle(self, _uid: str, event: Event) -> float | None:
        """None when done, else seconds until the next try."""
        meta = event.object["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            if event.type == "DELETED" or meta.get("deletionTimestamp"):
                self._delete(event)
            else:
                self._apply(event.object)
        except (psycopg.Error, api.ApiError) as error:
            return controller.retry_later(f"NotificationPolicy {where}", error, log)
        return None

    def _apply(self, body: Obj) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            notify = spec_module.notification_policy(name, body.get("spec"))
        except spec_module.SpecError as error:
            log.warning(
                "NotificationPolicy %s/%s: %s; the stored form stays", namespace, name, error
            )
            self._write_status(body, ready=False, reason="InvalidSpec", message=str(error))
            return
        if (
            finalizers.add(
                self._kube,
                api.notification_policy_path(namespace, name),
                finalizers=meta.get("finalizers") or (),
                version=str(meta.get("resourceVersion") or ""),
            )
            is None
        ):
            return  # gone, or being deleted: the deletion's event does the rest
        with self._pool.connection() as conn:
            with conn.transaction():
                shown = notifications.upsert_policy(conn, namespace, notify, now=self._clock())
            if shown:
                log.info("NotificationPolicy %s/%s stored", namespace, name)
                self._unrendered.add(namespace)
            self._render_members(conn, namespace)
        self._write_status(body, ready=True, reason="InForce", message=_summary(notify))

    def _delete(self, event: Event) -> None:
        meta = event.object["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if name == notifications.POLICY_NAME:
            with self._pool.connection() as conn:
                with conn.transaction():
                    removed = notifications.delete_policy(conn, namespace)
                if removed:
                    log.info(
                        "NotificationPolicy %s/%s deleted: its notifications stop", namespace, name
                    )
                    self._unrendered.add(namespace)
                self._render_members(conn, namespace)
        if event.type != "DELETED":
            finalizers.remove(
                self._kube,
                api.notification_policy_path(namespace, name),
                finalizers=meta.get("finalizers") or (),
                version=str(meta.get("resourceVersion") or ""),
            )

    def _render_members(self, conn: Any, namespace: str) -> None:
        if namespace not in self._unrendered:
            return
        self._publisher.refresh_statuses(conn, notifications.policy_members(conn, namespace))
        self._unrendered.discard(namespace)

    def _write_status(self, body: Obj, *, ready: bool, reason: str, message: str) -> None:
        meta = body["metadata"]
        ready_condition.write(
            self._kube,
            api.notification_policy_path(meta["namespace"], meta["name"], subresource="status"),
            body,
            ready=ready,
            reason=reason,
            message=message,
            now=self._clock() or clock.local(),
        )


def _summary(notify: dict[str, Any]) -> str:
    _, targets = notifications.shown(notify)
    return f"the namespace's jobs without spec.notify notify {', '.join(targets)}"
