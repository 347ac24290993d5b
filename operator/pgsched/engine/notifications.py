"""Notifications: ``spec.notify`` and the outbox it fills (migration 0024).

A ScheduledJob names its targets — a generic webhook (signed JSON), a Slack-compatible
incoming webhook, a CloudEvents 1.0 HTTP receiver — and the events each wants: ``failed``
(each attempt, or only the final one: ``failedOn``), ``retried``, ``autoSuspended``,
``skipped``, ``recovered`` (succeeded after a failure) and ``deadlineMissed``. A target
that names none gets all but ``skipped``: most skips are plans (a suspension, a holiday),
and a pager should ring for trouble (docs/notifications.md, "Skipped occurrences").

Nothing here sends anything. The database derives one notification row per matching
target from the run-events outbox, in the transaction of the change that causes it (the
trigger function in ``sql/functions/derive_notifications.sql``); this module holds what
the trigger and delivery both read of a target (its events, types, URL and Secret
reference; ``spec.notify`` checks a spec against them at apply) and gives the delivery
service (``pgsched.k8s.notifications.notifier``) its claims and verdicts. Every write is
fenced on the row still ``PENDING`` under the claim's lease token: a delivery whose lease
ran out (and was claimed again elsewhere) changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgsched.db import queries

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

EVENTS = ("failed", "retried", "autoSuspended", "skipped", "recovered", "deadlineMissed")
TARGET_TYPES = ("Webhook", "Slack", "CloudEvents")
FAILED_ON = ("FinalAttempt", "EachAttempt")
# The one NotificationPolicy of a namespace that its jobs use (migration 0031).
POLICY_NAME = "default"
MAX_URL_LENGTH = 2048
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_URL = re.compile(r"^https?://[^\s/?#@]+(/[^\s]*)?$")


@dataclass(frozen=True)
class SecretRef:
    """A key of a Secret in the ScheduledJob's own namespace (there is no namespace field)."""

    name: str
    key: str


@dataclass(frozen=True)
class Claimed:
    """A notification claimed for one delivery attempt under ``lease_token``."""

    id: int
    idempotency_key: str
    namespace: str
    name: str
    event: str
    target_name: str
    target: Mapping[str, Any]
    payload: Mapping[str, Any]
    attempts: int
    lease_token: UUID


def valid_url(url: Any) -> bool:
    """An http(s) URL without credentials, spaces or an absurd length."""
    return isinstance(url, str) and len(url) <= MAX_URL_LENGTH and bool(_URL.match(url))


def secret_ref(value: Any) -> SecretRef | None:
    """A ``{name, key}`` reference to a Secret in the target's namespace; None if it is
    not one (``spec.notify`` refuses such a target at apply; delivery reads it again)."""
    ok = (
        isinstance(value, Mapping)
        and set(value) == {"name", "key"}
        and isinstance(value["name"], str)
        and isinstance(value["key"], str)
        and bool(_SECRET_NAME.match(value["name"]))
        and bool(_SECRET_KEY.match(value["key"]))
    )
    return SecretRef(str(value["name"]), str(value["key"])) if ok else None


# -- The outbox -----------------------------------------------------------------------------


def claim(
    conn: Connection, *, limit: int, lease_seconds: float, now: datetime | None = None
) -> list[Claimed]:
    """Lease up to ``limit`` due notifications, each the head of its line."""
    if limit <= 0:
        return []
    with conn.transaction():
        rows = conn.execute(
            queries.get("claim_notifications"),
            {"limit": limit, "lease_seconds": lease_seconds, "now": now},
        ).fetchall()
    return [Claimed(**row) for row in rows]


def delivered(conn: Connection, claimed: Claimed, *, now: datetime | None = None) -> bool:
    """False: the lease was lost (another replica owns the row now)."""
    row = conn.execute(
        queries.get("notification_delivered"),
        {"id": claimed.id, "lease_token": claimed.lease_token, "now": now},
    ).fetchone()
    return row is not None


def failed(
    conn: Connection,
    claimed: Claimed,
    *,
    error: str,
    retry_at: datetime,
    max_attempts: int,
    final: bool,
    now: datetime | None = None,
) -> str | None:
    """Record a failed attempt; the row's new state (``PENDING`` or ``DEAD``), None if the
    lease was lost."""
    row = conn.execute(
        queries.get("notification_failed"),
        {
            "id": claimed.id,
            "lease_token": claimed.lease_token,
            "error": error,
            "retry_at": retry_at,
            "max_attempts": max_attempts,
            "final": final,
            "now": now,
        },
    ).fetchone()
    return None if row is None else str(row["state"])


def deferred(conn: Connection, claimed: Claimed, *, retry_at: datetime) -> None:
    conn.execute(
        queries.get("notification_deferred"),
        {"id": claimed.id, "lease_token": claimed.lease_token, "retry_at": retry_at},
    )


def forget_finished(
    conn: Connection, *, retention_seconds: float, now: datetime | None = None
) -> int:
    cursor = conn.execute(
        queries.get("forget_finished_notifications"),
        {"retention_seconds": retention_seconds, "now": now},
    )
    return cursor.rowcount


def dead_letters(conn: Connection, *, limit: int = 20) -> list[dict[str, Any]]:
    return list(conn.execute(queries.get("dead_notifications"), {"limit": limit}).fetchall())


def dead_counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(queries.get("dead_notification_counts")).fetchall()
    return {str(row["namespace"]): int(row["dead"]) for row in rows}


def of_run(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    return list(conn.execute(queries.get("notifications_of_run"), {"run_id": run_id}).fetchall())


# -- A namespace's default (migration 0031) --------------------------------------------------


@dataclass(frozen=True)
class Effective:
    """What a job's changes notify, computed in the database (``pgsched.effective_notify``,
    the trigger's own function) from its spec.notify and its namespace's policy."""

    source: str  # e.g. "NotificationPolicy default", "spec.notify"
    failed_on: str
    targets: tuple[str, ...]  # "<name> (<type>)"

    def as_json(self) -> dict[str, Any]:
        """As ``status.notifications`` and ``pgsched describe -o json`` show it."""
        return {"source": self.source, "failedOn": self.failed_on, "targets": list(self.targets)}

    @property
    def summary(self) -> str:
        """One line for people: ``oncall (Webhook), chat (Slack) from NotificationPolicy
        default``."""
        if not self.targets:
            return f"nothing: {self.source}"
        return f"{', '.join(self.targets)} from {self.source}"


def upsert_policy(
    conn: Connection, namespace: str, notify: Mapping[str, Any], *, now: datetime | None = None
) -> bool:
    """Store a namespace's policy; True if what its jobs' statuses show of it changed
    (``shown``): it is new, or a target, its type or ``failedOn`` changed. A new URL or
    Secret reference applies all the same, and shows nowhere."""
    row = conn.execute(
        queries.get("upsert_notification_policy"),
        {"namespace": namespace, "notify": json.dumps(notify), "now": now},
    ).fetchone()
    if row is None:
        return False
    return row["previous"] is None or shown(row["previous"]) != shown(notify)


def shown(notify: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What a job's status shows of a policy: ``failedOn`` and its targets."""
    targets = notify.get("targets") or []
    return (
        str(notify.get("failedOn") or FAILED_ON[0]),
        tuple(f"{item['name']} ({item['type']})" for item in targets),
    )


def delete_policy(conn: Connection, namespace: str) -> bool:
    """Forget a namespace's policy; True if one was stored."""
    row = conn.execute(
        queries.get("delete_notification_policy"), {"namespace": namespace}
    ).fetchone()
    return row is not None


def policy_members(conn: Connection, namespace: str) -> list[UUID]:
    """The live jobs whose notifications follow the namespace's policy."""
    rows = conn.execute(queries.get("notification_policy_members"), {"namespace": namespace})
    return [row["id"] for row in rows]


def effective(conn: Connection, definition_id: UUID) -> Effective | None:
    """None: the job notifies nothing, and nothing says it (no spec.notify, no policy)."""
    row = conn.execute(queries.get("effective_notify"), {"definition_id": definition_id}).fetchone()
    found = None if row is None else row["notify"]
    if not found:
        return None
    failed_on, targets = shown(found)
    return Effective(source=str(found["source"]), failed_on=failed_on, targets=targets)
