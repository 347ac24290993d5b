"""Notifications: ``spec.notify`` and the outbox it fills (migration 0024).

A ScheduledJob names its targets — a generic webhook (signed JSON), a Slack-compatible
incoming webhook, a CloudEvents 1.0 HTTP receiver — and the events each wants: ``failed``
(each attempt, or only the final one: ``failedOn``), ``retried``, ``autoSuspended``,
``skipped``, ``recovered`` (succeeded after a failure) and ``deadlineMissed``.

Nothing here sends anything. The database derives one notification row per matching
target from the run-events outbox, in the transaction of the change that causes it (the
trigger function in ``sql/functions/derive_notifications.sql``); this module validates
the spec the trigger reads and gives the delivery service
(``pgsched.k8s.notifications.notifier``) its claims and verdicts. Every write is fenced on
the row still ``PENDING`` under the claim's lease token: a delivery whose lease ran out
(and was claimed again elsewhere) changes nothing.
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
from pgsched.validation import Problems

if TYPE_CHECKING:
    from pgsched.db.connection import Connection

EVENTS = ("failed", "retried", "autoSuspended", "skipped", "recovered", "deadlineMissed")
TARGET_TYPES = ("Webhook", "Slack", "CloudEvents")
FAILED_ON = ("FinalAttempt", "EachAttempt")
MAX_TARGETS = 10
# The one NotificationPolicy of a namespace that its jobs use (migration 0031).
POLICY_NAME = "default"
MAX_URL_LENGTH = 2048
_TARGET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_URL = re.compile(r"^https?://[^\s/?#@]+(/[^\s]*)?$")
_TARGET_EXAMPLE = (
    "{name: team, type: Webhook, url: 'https://hooks.example.com/pgsched',"
    " signingSecretRef: {name: pgsched-notify, key: hmac}}"
)
_EXAMPLE = f"notify: {{targets: [{_TARGET_EXAMPLE}]}}"
_POLICY_EXAMPLE = f"spec: {{targets: [{_TARGET_EXAMPLE}]}}"


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


def parse(value: Any, problems: Problems) -> None:
    """Check a ScheduledJob's ``spec.notify``, adding a problem per bad field (the trigger
    reads it as is). Besides the targets it may say how it relates to its namespace's
    NotificationPolicy: ``inherit: true`` adds the policy's targets, ``inherit: false``
    without targets opts out of it (docs/notifications.md, "A namespace's default")."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.add("spec.notify", "must be an object", _EXAMPLE)
        return
    _unknown(value, {"failedOn", "targets", "inherit"}, "spec.notify", problems)
    inherit = value.get("inherit")
    if inherit is not None and not isinstance(inherit, bool):
        problems.add(
            "spec.notify.inherit",
            f"must be true or false, got {_shown(inherit)}",
            "notify: {inherit: false}  # no notifications, not even the namespace's default",
        )
        return
    if inherit is False and "targets" not in value:
        if "failedOn" in value:
            problems.add(
                "spec.notify.failedOn",
                "has no effect: inherit: false without targets means no notifications",
                "notify: {inherit: false}",
            )
        return
    _targets_and_failed_on(
        value,
        "spec.notify",
        problems,
        optional=inherit is True,
        example=_EXAMPLE,
        alternative=" (or inherit: false, to send none)",
    )


def parse_policy(value: Any, problems: Problems) -> None:
    """Check a NotificationPolicy's ``spec``: the targets and ``failedOn`` of a
    ``spec.notify``, which the namespace's jobs without one use."""
    if not isinstance(value, Mapping):
        problems.add("spec", "must be an object", _POLICY_EXAMPLE)
        return
    _unknown(value, {"failedOn", "targets"}, "spec", problems, example=_POLICY_EXAMPLE)
    _targets_and_failed_on(value, "spec", problems, optional=False, example=_POLICY_EXAMPLE)


def _targets_and_failed_on(
    value: Mapping[str, Any],
    path: str,
    problems: Problems,
    *,
    optional: bool,
    example: str,
    alternative: str = "",
) -> None:
    failed_on = value.get("failedOn")
    if failed_on is not None and failed_on not in FAILED_ON:
        problems.add(
            f"{path}.failedOn",
            f"{_shown(failed_on)} is not one of {', '.join(FAILED_ON)}",
            "failedOn: EachAttempt",
        )
    targets = value.get("targets")
    if optional and targets is None:
        return
    if not isinstance(targets, list) or not targets:
        problems.add(
            f"{path}.targets", f"must be a non-empty list of targets{alternative}", example
        )
        return
    if len(targets) > MAX_TARGETS:
        problems.add(
            f"{path}.targets", f"names {len(targets)} targets, at most {MAX_TARGETS}", example
        )
        return
    seen: set[str] = set()
    for index, target in enumerate(targets):
        name = _target(target, f"{path}.targets[{index}]", problems)
        if name is not None and name in seen:
            problems.add(
                f"{path}.targets[{index}].name",
                f"{_shown(name)} is named twice",
                f"name: {name}-2",
            )
        if name is not None:
            seen.add(name)


def _target(target: Any, path: str, problems: Problems) -> str | None:
    if not isinstance(target, Mapping):
        problems.add(path, "must be an object", _EXAMPLE)
        return None
    _unknown(
        target,
        {"name", "type", "url", "urlSecretRef", "signingSecretRef", "events"},
        path,
        problems,
    )
    name = target.get("name")
    if not isinstance(name, str) or not _TARGET_NAME.match(name):
        problems.add(
            f"{path}.name",
            f"{_shown(name)} is not a target name (lowercase letters, digits and '-', at most 63)",
            "name: team-webhook",
        )
        name = None
    kind = target.get("type")
    if kind not in TARGET_TYPES:
        problems.add(
            f"{path}.type",
            f"{_shown(kind)} is not one of {', '.join(TARGET_TYPES)}",
            "type: Webhook",
        )
    url, url_ref = target.get("url"), target.get("urlSecretRef")
    if (url is None) == (url_ref is None):
        problems.add(
            path,
            "exactly one of url or urlSecretRef must be set",
            "url: 'https://hooks.example.com/pgsched'",
        )
    elif url is not None and not valid_url(url):
        problems.add(
            f"{path}.url",
            f"{_shown(url)} is not an http(s) URL without credentials",
            "url: 'https://hooks.example.com/pgsched'",
        )
    elif url_ref is not None:
        secret_ref(url_ref, f"{path}.urlSecretRef", problems)
    signing = target.get("signingSecretRef")
    if signing is not None:
        secret_ref(signing, f"{path}.signingSecretRef", problems)
    elif kind == "Webhook":
        problems.add(
            f"{path}.signingSecretRef",
            "is required for a Webhook target: its receiver verifies the HMAC-SHA256 signature",
            "signingSecretRef: {name: pgsched-notify, key: hmac}",
        )
    events = target.get("events")
    if events is not None and (
        not isinstance(events, list) or not events or any(event not in EVENTS for event in events)
    ):
        problems.add(
            f"{path}.events",
            f"must be a non-empty list of events, each one of {', '.join(EVENTS)}; got {_shown(events)}",
            "events: [failed, recovered]",
        )
    return name


def _shown(value: Any) -> str:
    """A value quoted in a message, cut at 80 characters: a message reaches a condition,
    an Event and kubectl's answer, whatever size the input was."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def valid_url(url: Any) -> bool:
    """An http(s) URL without credentials, spaces or an absurd length."""
    return isinstance(url, str) and len(url) <= MAX_URL_LENGTH and bool(_URL.match(url))


def secret_ref(value: Any, path: str, problems: Problems | None = None) -> SecretRef | None:
    """A ``{name, key}`` reference; None (and a problem, when collecting) if it is not one."""
    ok = (
        isinstance(value, Mapping)
        and set(value) == {"name", "key"}
        and isinstance(value["name"], str)
        and isinstance(value["key"], str)
        and bool(_SECRET_NAME.match(value["name"]))
        and bool(_SECRET_KEY.match(value["key"]))
    )
    if not ok:
        if problems is not None:
            owner = "ScheduledJob" if path.startswith("spec.notify") else "NotificationPolicy"
            problems.add(
                path,
                f"must be {{name, key}} of a Secret in the {owner}'s namespace",
                f"{path.rsplit('.', 1)[-1]}: {{name: pgsched-notify, key: hmac}}",
            )
        return None
    return SecretRef(str(value["name"]), str(value["key"]))


def _unknown(
    source: Mapping[str, Any],
    known: set[str],
    path: str,
    problems: Problems,
    *,
    example: str = _EXAMPLE,
) -> None:
    for key in source:
        if key not in known:
            problems.add(
                f"{path}.{key}",
                f"unknown field; known fields are {', '.join(sorted(known))}",
                example,
            )


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
