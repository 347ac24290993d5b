"""Signed-in visitors: a random session id in the browser, the bearer token only here.

The sign-in form used to keep the visitor's token in the cookie itself, so anything that
saw the cookie (a proxy's log, a shared machine, a browser extension) held a Kubernetes
credential. Now the cookie carries a random 256-bit id; the token stays in this process's
memory, where every request re-checks it through the TokenReview cache (a revoked or
expired token ends the session within the cache's ttl).

Sessions live in the memory of one UI process (one operator replica): a replica that
restarts signs its visitors out, and a visitor must keep reaching the same replica, which
``kubectl port-forward`` does by itself and the chart's UI Service does with
``sessionAffinity: ClientIP`` (docs/ui.md says why this beats a signed cookie: signing out
really ends a session, and no key has to be shared and rotated). A session ends when it
has been idle for ``idle`` seconds, ``lifetime`` seconds after sign-in whatever happens, or
on sign-out. At most ``per_identity`` sessions are kept for one identity (its least
recently used goes when it opens one more: one identity signing in ten thousand times
evicts only its own), and at most ``limit`` in all (the least recently used goes).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

IDLE_SECONDS = 30 * 60
LIFETIME_SECONDS = 8 * 3600
LIMIT = 10_000
PER_IDENTITY = 10


@dataclass(frozen=True)
class Session:
    id: str
    token: str
    identity: str  # who the token says (the TokenReview's user name)
    # Sent back by the sign-out form: another site cannot sign a visitor out.
    csrf: str
    ends_at: float  # by the store's clock; the lifetime, whatever the activity

    def checks(self, csrf: str) -> bool:
        return hmac.compare_digest(self.csrf, csrf)


class Sessions:
    def __init__(
        self,
        *,
        idle: float = IDLE_SECONDS,
        lifetime: float = LIFETIME_SECONDS,
        limit: int = LIMIT,
        per_identity: int = PER_IDENTITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self._limit = limit
        self._per_identity = per_identity
        self._clock = clock
        self._lock = threading.Lock()
        # id -> (session, idle deadline); ordered from least to most recently used
        self._items: OrderedDict[str, tuple[Session, float]] = OrderedDict()
        # identity -> its session ids, least to most recently used
        self._of: dict[str, OrderedDict[str, None]] = {}

    def open(self, token: str, *, identity: str) -> Session:
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32),
            token=token,
            identity=identity,
            csrf=secrets.token_urlsafe(32),
            ends_at=now + self.lifetime,
        )
        with self._lock:
            own = self._of.setdefault(identity, OrderedDict())
            while len(own) >= self._per_identity:
                self._forget(next(iter(own)))
            while len(self._items) >= self._limit:
                self._forget(next(iter(self._items)))
            self._items[session.id] = (session, now + self.idle)
            own[session.id] = None
        return session

    def _forget(self, session_id: str) -> None:
        """Drop a session (the lock held)."""
        found = self._items.pop(session_id, None)
        if found is None:
            return
        own = self._of.get(found[0].identity)
        if own is not None:
            own.pop(session_id, None)
            if not own:
                del self._of[found[0].identity]

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle clock restarts), or None."""
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            found = self._items.get(session_id)
            if found is None:
                return None
            session, idle_until = found
            if now >= idle_until or now >= session.ends_at:
                self._forget(session_id)
                return None
            self._items[session_id] = (session, now + self.idle)
            self._items.move_to_end(session_id)
            self._of[session.identity].move_to_end(session_id)
            return session

    def close(self, session_id: str) -> None:
        with self._lock:
            self._forget(session_id)
