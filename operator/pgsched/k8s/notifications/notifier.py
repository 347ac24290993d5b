"""Delivery of notifications from the outbox (``engine.notifications``, ``pgsched.notifications``).

A service of the publisher thread's loop, never of the tick: ``run_once`` records what
finished since its last round, claims as many due notifications as it has idle workers,
and hands them to a small pool of worker threads. It never waits for a receiver, so a
receiver that hangs costs a worker, not the loop, the tick or any other receiver.

Each attempt has one deadline, from resolving the receiver's name to the answer's last
byte. Concurrency is bounded per namespace (a tenant's receivers, however many hosts and
ports they use, hold at most that many workers) and per resolved address (with a rate),
so one slow or hostile receiver cannot take the others' share. Destinations that resolve
to loopback, link-local, private or other non-public addresses are refused unless the
administrator allows them (``destinations``): a refusal is a dead letter at once, its
message saying what to allow. Failed attempts are retried with backoff until the
row is a dead letter. Delivery is at least once: receivers de-duplicate on
``Idempotency-Key``. Secrets are read when sending, from the ScheduledJob's own namespace.

The bounds, retries and leases: docs/architecture.md, "Delivering notifications".
"""

from __future__ import annotations

import base64
import http.client
import logging
import random
import threading
import time
import urllib.parse
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pgsched import metrics
from pgsched.db import clock
from pgsched.db.connection import Connection
from pgsched.engine import notifications
from pgsched.engine.notifications import Claimed
from pgsched.k8s.client import api
from pgsched.k8s.notifications import destinations, receivers

log = logging.getLogger(__name__)

DEFERRED_SECONDS = 1.0
# How often the dead-letter gauge is read and finished rows past the retention deleted.
HOUSEKEEPING_SECONDS = 30.0


class SecretError(Exception):
    """A referenced Secret or key cannot be read (retried: it may be created later)."""


class SecretReader(Protocol):
    def read(self, namespace: str, name: str, key: str) -> bytes: ...


class KubeSecrets:
    """Secrets read through the API: one ``get`` of a named Secret in a namespace."""

    def __init__(self, kube: api.KubeApi) -> None:
        self.kube = kube

    def read(self, namespace: str, name: str, key: str) -> bytes:
        try:
            secret = self.kube.get(api.path_of(namespace=namespace, plural="secrets", name=name))
        except api.ApiError as error:
            raise SecretError(
                f"Secret {namespace}/{name} cannot be read (HTTP {error.status})"
            ) from None
        value = (secret.get("data") or {}).get(key)
        if value is None:
            raise SecretError(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(value)


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: ``delivered``, ``failed`` (``final``: never retry) or
    ``deferred`` (not attempted: a per-namespace or per-address bound)."""

    kind: str
    error: str = ""
    final: bool = False


@dataclass
class NotifyResult:
    claimed: int = 0
    delivered: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    deferred: int = 0
    in_flight: int = 0


class _Bucket:
    """A token bucket: ``rate`` a second, up to ``burst`` at once."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Notifier:
    def __init__(
        self,
        secrets: SecretReader,
        *,
        workers: int = 8,
        per_namespace_concurrency: int = 2,
        per_address_concurrency: int = 2,
        per_address_rate: float = 5.0,
        allowed: destinations.Allowed = destinations.PUBLIC_ONLY,
        resolver: destinations.Resolver | None = None,
        timeout: float = 5.0,
        deadline: float = 10.0,
        lease_seconds: float = 60.0,
        max_attempts: int = 10,
        backoff_seconds: float = 5.0,
        max_backoff_seconds: float = 600.0,
        retention_seconds: float = 7 * 86400,
    ) -> None:
        self.secrets = secrets
        self.workers = workers
        self.per_namespace_concurrency = per_namespace_concurrency
        self.per_address_concurrency = per_address_concurrency
        self.per_address_rate = per_address_rate
        self.allowed = allowed
        self.resolver = resolver or destinations.Resolver()
        self.timeout, self.deadline = timeout, deadline
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.backoff_seconds, self.max_backoff_seconds = backoff_seconds, max_backoff_seconds
        self.retention_seconds = retention_seconds
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pgsched-notify")
        self._lock = threading.Lock()
        self._in_flight: dict[Future[Outcome], Claimed] = {}
        self._namespace_busy: dict[str, int] = defaultdict(int)
        self._address_busy: dict[str, int] = defaultdict(int)
        self._buckets: dict[str, _Bucket] = {}
        self._housekept = float("-inf")

    def run_once(self, conn: Connection, *, now: datetime | None = None) -> NotifyResult:
        """Record finished deliveries, then start as many due ones as there are idle
        workers. Never waits for a receiver."""
        result = NotifyResult()
        at = clock.now(conn, now)
        self._record_finished(conn, at, result)
        idle = self.workers - len(self._in_flight)
        for claimed in notifications.claim(
            conn, limit=idle, lease_seconds=self.lease_seconds, now=now
        ):
            result.claimed += 1
            self._in_flight[self._pool.submit(self._deliver, claimed)] = claimed
        result.in_flight = len(self._in_flight)
        if time.monotonic() - self._housekept >= HOUSEKEEPING_SECONDS:
            self._housekeeping(conn, now)
        return result

    def busy(self) -> bool:
        return bool(self._in_flight)

    def close(self, conn: Connection | None = None) -> NotifyResult:
        """Stop taking work. With ``conn`` (a graceful stop), wait for the deliveries under
        way (each ends within ``deadline``) and record them, so a restart sends nothing
        twice; without, or if recording fails, their leases run out and they are
        delivered again."""
        result = NotifyResult()
        self._pool.shutdown(wait=conn is not None, cancel_futures=True)
        if conn is not None:
            self._record_finished(conn, clock.now(conn), result)
        return result

    def _record_finished(self, conn: Connection, at: datetime, result: NotifyResult) -> None:
        for future in [future for future in self._in_flight if future.done()]:
            claimed = self._in_flight.pop(future)
            self._record(conn, claimed, _outcome(future), at, result)

    # -- A worker's part ----------------------------------------------------------------

    def _deliver(self, claimed: Claimed) -> Outcome:
        target = claimed.target
        try:
            url = self._url(claimed)
            signing = target.get("signingSecretRef")
            key = self._secret(claimed.namespace, signing) if signing else None
        except SecretError as error:
            return Outcome("failed", str(error))
        if not self._enter(self._namespace_busy, claimed.namespace, self.per_namespace_concurrency):
            return Outcome("deferred")
        try:
            return self._attempt(claimed, url, key)
        finally:
            self._leave(self._namespace_busy, claimed.namespace)

    def _attempt(self, claimed: Claimed, url: str, key: bytes | None) -> Outcome:
        """One attempt within one deadline: resolve, check, connect, send, read."""
        deadline = destinations.Deadline.starting(self.deadline)
        host = urllib.parse.urlsplit(url).hostname or url
        try:
            host, port = receivers.endpoint(url)
            found = self.resolver.addresses(
                host, port, namespace=claimed.namespace, deadline=deadline
            )
            address = destinations.permitted(host, found, self.allowed)
        except destinations.Busy:
            return Outcome("deferred")
        except destinations.Refused as error:
            # Not the URL: one kept in a Secret may carry a token, and errors are shown.
            return Outcome("failed", f"refused: {error}", final=True)
        except (OSError, ValueError) as error:  # ValueError: a bad port
            return Outcome("failed", f"{host}: {type(error).__name__}: {error}")
        if not self._enter(self._address_busy, address, self.per_address_concurrency):
            return Outcome("deferred")
        try:
            body, content_type = receivers.body_of(str(claimed.target["type"]), claimed.payload)
            headers = receivers.headers_for(
                idempotency_key=claimed.idempotency_key,
                content_type=content_type,
                body=body,
                signing_key=key,
            )
            answer = receivers.post(
                url, address, body, headers, timeout=self.timeout, deadline=deadline
            )
        except (OSError, http.client.HTTPException) as error:
            return Outcome("failed", f"{host} ({address}): {type(error).__name__}: {error}")
        finally:
            self._leave(self._address_busy, address)
        return _judged(host, answer)

    def _url(self, claimed: Claimed) -> str:
        url = claimed.target.get("url")
        if isinstance(url, str):
            return url
        text = self._secret(claimed.namespace, claimed.target["urlSecretRef"])
        url = text.decode("utf-8", "replace").strip()
        if not notifications.valid_url(url):
            raise SecretError("the value of urlSecretRef is not an http(s) URL without credentials")
        return url

    def _secret(self, namespace: str, ref: Any) -> bytes:
        found = notifications.secret_ref(ref)
        if found is None:
            raise SecretError("the target's secret reference is not {name, key}")
        return self.secrets.read(namespace, found.name, found.key)

    def _enter(self, busy: dict[str, int], key: str, limit: int) -> bool:
        """A slot for ``key`` (a namespace, or an address with its rate too)."""
        with self._lock:
            if busy[key] >= limit:
                return False
            if busy is self._address_busy:
                bucket = self._buckets.setdefault(
                    key, _Bucket(self.per_address_rate, 2 * self.per_address_rate)
                )
                if not bucket.take():
                    return False
            busy[key] += 1
            return True

    def _leave(self, busy: dict[str, int], key: str) -> None:
        with self._lock:
            busy[key] -= 1
            if not busy[key]:
                del busy[key]

    # -- The loop's part ----------------------------------------------------------------

    def _record(
        self,
        conn: Connection,
        claimed: Claimed,
        outcome: Outcome,
        at: datetime,
        result: NotifyResult,
    ) -> None:
        kind = str(claimed.target.get("type"))
        if outcome.kind == "deferred":
            notifications.deferred(conn, claimed, retry_at=at + timedelta(seconds=DEFERRED_SECONDS))
            result.deferred += 1
            metrics.NOTIFICATIONS.labels(claimed.namespace, kind, "deferred").inc()
            return
        if outcome.kind == "delivered":
            if notifications.delivered(conn, claimed, now=at):
                result.delivered.append(claimed.id)
                metrics.NOTIFICATIONS.labels(claimed.namespace, kind, "delivered").inc()
            return
        state = notifications.failed(
            conn,
            claimed,
            error=outcome.error,
            retry_at=at + timedelta(seconds=self._backoff(claimed.attempts)),
            max_attempts=self.max_attempts,
            final=outcome.final,
            now=at,
        )
        if state == "DEAD":
            result.dead.append(claimed.id)
            log.warning(
                "notification %s (%s/%s %s to %s) is a dead letter after %s attempts: %s",
                claimed.idempotency_key,
                claimed.namespace,
                claimed.name,
                claimed.event,
                claimed.target_name,
                claimed.attempts + 1,
                outcome.error,
            )
        elif state is not None:
            result.failed.append(claimed.id)
        if state is not None:
            outcome_label = "dead" if state == "DEAD" else "failed"
            metrics.NOTIFICATIONS.labels(claimed.namespace, kind, outcome_label).inc()

    def _backoff(self, attempts: int) -> float:
        """Seconds before attempt ``attempts + 2``: doubling, capped, +-20 % jitter."""
        base = min(self.max_backoff_seconds, self.backoff_seconds * 2.0 ** min(attempts, 30))
        return base * random.uniform(0.8, 1.2)

    def _housekeeping(self, conn: Connection, now: datetime | None) -> None:
        self._housekept = time.monotonic()
        notifications.forget_finished(conn, retention_seconds=self.retention_seconds, now=now)
        metrics.NOTIFICATIONS_DEAD.clear()
        for namespace, dead in notifications.dead_counts(conn).items():
            metrics.NOTIFICATIONS_DEAD.labels(namespace).set(dead)


def _outcome(future: Future[Outcome]) -> Outcome:
    if future.cancelled():  # never started (a stop): back in line, no attempt spent
        return Outcome("deferred")
    try:
        return future.result()
    except Exception as error:  # a bug in a worker: the attempt failed, the loop goes on
        log.exception("notification delivery failed unexpectedly")
        return Outcome("failed", f"{type(error).__name__}: {error}")


def _judged(host: str, answer: receivers.Answer) -> Outcome:
    status = answer.status
    if 200 <= status < 300:
        return Outcome("delivered")
    if 300 <= status < 400:
        return Outcome(
            "failed", f"{host} answered {status}, a redirect to {answer.location!r}: not followed"
        )
    text = answer.body[:200].decode("utf-8", "replace")
    retryable = status >= 500 or status in (408, 425, 429)
    return Outcome("failed", f"{host} answered {status}: {text}", final=not retryable)
